"""CloseIntent rules and the digest both sides of the queue agree on."""

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from ops_contracts import (
    PARSED_STRICT_JSON,
    CloseAction,
    CloseIntent,
    canonical_json,
    close_intent_digest,
    close_intent_encoding,
)


def complete(**overrides: Any) -> CloseIntent:
    fields: dict[str, Any] = {
        "action": "complete",
        "worker_id": "rein-aharness@railiance01",
        "result": {"ok": True, "path": "briefs/x.md"},
    }
    fields.update(overrides)
    return CloseIntent.model_validate(fields)


def fail(**overrides: Any) -> CloseIntent:
    fields: dict[str, Any] = {
        "action": "fail",
        "worker_id": "rein-aharness@railiance01",
        "error": "llm timeout",
        "reopen": False,
    }
    fields.update(overrides)
    return CloseIntent.model_validate(fields)


def test_valid_intents() -> None:
    assert complete().action is CloseAction.complete
    assert complete().version == 1
    assert fail().result is None
    assert fail(reopen=True, result={"ok": False}).reopen is True
    assert CloseIntent(action=CloseAction.complete, worker_id="w", result={}).error is None


@pytest.mark.parametrize(
    "build",
    [
        lambda: complete(error="x"),
        lambda: complete(reopen=True),
        lambda: complete(result=None),
        lambda: fail(error=None),
        lambda: fail(error=""),
        lambda: fail(error="e" * 4097),
        lambda: fail(reopen="true"),
        lambda: fail(action="close"),
        lambda: fail(version=2),
        lambda: fail(version=True),
        lambda: fail(version=1.0),
        lambda: fail(version="1"),
        lambda: fail(worker_id="bad id"),
        lambda: fail(prompt="secret"),
        lambda: complete(result={"x": float("nan")}),
        lambda: complete(result={"x": [float("inf")]}),
        lambda: complete(result={"x": object()}),
    ],
)
def test_invalid_intents_are_refused(build: Any) -> None:
    with pytest.raises(ValidationError):
        build()


def test_intent_is_frozen() -> None:
    intent = fail()
    with pytest.raises(ValidationError):
        intent.reopen = True  # type: ignore[misc]


def test_digest_is_the_documented_function() -> None:
    intent = fail()
    canonical = (
        b'{"action":"fail","error":"llm timeout","reopen":false,"result":null,'
        b'"version":1,"worker_id":"rein-aharness@railiance01"}'
    )
    expected = hashlib.sha256(b"ops-close-intent/v1\n" + canonical).hexdigest()
    assert close_intent_digest(intent) == "ci1-" + expected


def test_golden_digest_never_changes() -> None:
    # The outbox keys pending intents and activity-core stores accepted ones by
    # this exact string; changing it breaks reconciliation of every old close.
    assert close_intent_digest(complete()) == (
        "ci1-2877322bbebcbc8cae03de3f6d03725071aba441d53102551f9767ca6b11d688"
    )


def test_result_key_order_does_not_matter() -> None:
    one = complete(result={"a": 1, "b": {"x": [1, 2], "y": None}})
    other = complete(result={"b": {"y": None, "x": [1, 2]}, "a": 1})
    assert close_intent_digest(one) == close_intent_digest(other)


def test_every_decision_changes_the_digest() -> None:
    base = fail()
    variants = [
        fail(worker_id="other@host"),
        fail(error="llm timeout."),
        fail(reopen=True),
        fail(result={"ok": False}),
        complete(),
        complete(result={"ok": True}),
    ]
    digests = {close_intent_digest(v) for v in variants}
    assert close_intent_digest(base) not in digests
    assert len(digests) == len(variants)


def test_digest_survives_a_json_round_trip() -> None:
    # The outbox stores the intent as JSON and replays it later.
    intent = complete(result={"n": 1.5, "s": "ümlaut", "l": [0, -1, True, None]})
    stored = intent.model_dump_json()
    assert close_intent_digest(CloseIntent.model_validate_json(stored)) == close_intent_digest(
        intent
    )
    assert close_intent_digest(CloseIntent.model_validate(json.loads(stored))) == (
        close_intent_digest(intent)
    )


@given(
    st.dictionaries(
        st.text(max_size=5),
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        max_size=6,
    )
)
def test_digest_depends_only_on_content(result: dict[str, Any]) -> None:
    reordered = dict(reversed(list(result.items())))
    assert close_intent_digest(complete(result=result)) == close_intent_digest(
        complete(result=reordered)
    )


def _containers_of(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=5), children, max_size=4)
    )


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    _containers_of,
    max_leaves=20,
)


@given(
    st.dictionaries(st.text(max_size=5), _JSON_VALUES, max_size=5),
    st.sampled_from(["complete", "fail"]),
    st.booleans(),
)
def test_digest_is_of_the_intent_as_model_dump_writes_it(
    result: dict[str, Any], action: str, reopen: bool
) -> None:
    # close_intent_digest builds the fields itself instead of dumping the model; for
    # every valid intent (tuples and floats inside the result included) the two agree.
    intent = (
        complete(result=result)
        if action == "complete"
        else fail(result=result or None, reopen=reopen, error='boom, "version": 2')
    )
    dumped = intent.model_dump(mode="json")
    expected = (
        "ci1-"
        + hashlib.sha256(
            b"ops-close-intent/v1\n"
            + json.dumps(dumped, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ).hexdigest()
    )
    assert close_intent_digest(intent) == expected
    digest, result_json = close_intent_encoding(intent)
    assert digest == expected
    assert result_json == (None if intent.result is None else canonical_json(intent.result))


def test_an_intent_of_strictly_parsed_values_is_not_encoded_to_prove_it_digestible() -> None:
    # PARSED_STRICT_JSON is the caller's promise that the result is finite JSON; without
    # it, the intent encodes the result and refuses what the digest could not encode.
    fields = {"action": "complete", "worker_id": "w", "result": {"x": float("nan")}}
    with pytest.raises(ValidationError):
        CloseIntent.model_validate(fields)
    assert CloseIntent.model_validate(fields, context=PARSED_STRICT_JSON).result is not None
    good = {"action": "complete", "worker_id": "w", "result": {"x": [1, "é"]}}
    assert close_intent_digest(
        CloseIntent.model_validate(good, context=PARSED_STRICT_JSON)
    ) == close_intent_digest(CloseIntent.model_validate(good))
