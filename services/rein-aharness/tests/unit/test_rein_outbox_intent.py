"""The v1 close intent: normalized, sanitized, bounded, and keyed by run + transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ops_contracts import CloseAction, close_intent_digest, digest_hex
from ops_evidence import MAX_ENCODED_BYTES, MAX_ERROR_CHARS, MAX_IDENTIFIER_CHARS, encoded_size
from rein_aharness.gateway import transaction_id_for
from rein_aharness.outbox import KEY_DOMAIN, InvalidCloseIntentError, entry_key, prepare_close
from rein_aharness.outbox.intent import (
    attempt_of_transaction,
    intent_problems,
    result_bound_problems,
)
from rein_worker_kit import ops_run

Factory = Callable[..., dict[str, Any]]


def test_entry_key_is_the_digest_of_run_id_and_transaction_id() -> None:
    assert KEY_DOMAIN == "rein-aharness/close-outbox-key/v1"
    expected = digest_hex({"run_id": "r", "transaction_id": "t"}, domain=KEY_DOMAIN)
    assert entry_key("r", "t") == expected
    assert entry_key("r", None) == digest_hex(
        {"run_id": "r", "transaction_id": None}, domain=KEY_DOMAIN
    )
    assert len({entry_key("r", "t"), entry_key("r", None), entry_key("r", "u")}) == 3


def test_prepared_close_keeps_identity_worker_and_digest(make_close: Factory) -> None:
    prepared = prepare_close(**make_close())
    assert prepared.key == entry_key(prepared.run_id, prepared.transaction_id)
    assert prepared.intent.worker_id == "rein-aharness@railiance01"
    assert prepared.intent.version == 1
    assert prepared.intent_digest == close_intent_digest(prepared.intent)


def test_a_failure_before_setup_has_no_transaction_id(make_fail: Factory) -> None:
    prepared = prepare_close(**make_fail(transaction_id=None))
    assert prepared.transaction_id is None
    assert prepared.key == entry_key(prepared.run_id, None)


def test_result_is_normalized_through_the_evidence_allowlist(make_close: Factory) -> None:
    raw = {
        "ok": True,
        "path": "briefs/x.md",
        "tool_output": "raw tool stream",
        "tool_error": "boom",
        "prompt": "you are a helpful...",
        "messages": [{"role": "user", "content": "secret"}],
        "provider_response": {"choices": []},
        "api_key": "sk-live-123",
        "evidence": {"rein_id": "rein-aharness", "outcome": "succeeded", "token": "sk"},
    }
    intent = prepare_close(**make_close(result=raw)).intent
    assert intent.result == {
        "ok": True,
        "path": "briefs/x.md",
        "execution_evidence": {"rein_id": "rein-aharness", "outcome": "succeeded"},
    }


def test_intent_holds_no_prompt_provider_body_credential_or_callback(
    make_close: Factory,
) -> None:
    intent = prepare_close(**make_close()).intent
    assert set(intent.model_dump()) == {
        "version",
        "action",
        "worker_id",
        "result",
        "error",
        "reopen",
    }


def test_error_is_sanitized_and_bounded(make_fail: Factory) -> None:
    intent = prepare_close(**make_fail(error="  line1\nline2\x00 " + "x" * 5000)).intent
    assert intent.error is not None
    assert "\n" not in intent.error and "\x00" not in intent.error
    assert len(intent.error) == MAX_ERROR_CHARS
    assert intent.error.startswith("line1 line2")


def test_failure_carries_explicit_reopen_decision(make_fail: Factory) -> None:
    assert prepare_close(**make_fail(reopen=True)).intent.reopen is True
    assert prepare_close(**make_fail()).intent.reopen is False
    with_result = prepare_close(**make_fail(result={"ok": False, "junk": 1})).intent
    assert with_result.result == {"ok": False}


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"action": "close"}, "action"),
        ({"result": None}, "result: required to complete"),
        ({"error": "x"}, "error: only a failure"),
        ({"reopen": True}, "reopen: only a failure"),
        ({"reopen": "yes"}, "reopen: must be a boolean"),
        ({"result": ["not", "an", "object"]}, "result: must be a JSON object"),
        ({"run_id": ""}, "run_id"),
        ({"run_id": "has space"}, "run_id"),
        ({"run_id": "r" * (MAX_IDENTIFIER_CHARS + 1)}, "run_id: longer than"),
        ({"transaction_id": "t" * (MAX_IDENTIFIER_CHARS + 1)}, "transaction_id"),
        ({"transaction_id": 7}, "transaction_id"),
        ({"worker_id": "bad worker"}, "worker_id"),
        ({"worker_id": "w" * 300}, "worker_id"),
    ],
)
def test_invalid_complete_intents_are_refused(
    make_close: Factory, overrides: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidCloseIntentError) as caught:
        prepare_close(**make_close(**overrides))
    assert any(problem in text for text in caught.value.problems), caught.value.problems


def test_a_failure_needs_an_error(make_fail: Factory) -> None:
    with pytest.raises(InvalidCloseIntentError, match="error: required to fail"):
        prepare_close(**make_fail(error=None))


def test_identifiers_at_the_bound_are_accepted(make_close: Factory) -> None:
    prepared = prepare_close(
        **make_close(run_id="r" * MAX_IDENTIFIER_CHARS, transaction_id="t" * MAX_IDENTIFIER_CHARS)
    )
    assert len(prepared.run_id) == MAX_IDENTIFIER_CHARS


def _object_of_size(size: int) -> dict[str, Any]:
    """A bounded-per-node JSON object whose canonical encoding is exactly `size` bytes."""
    value: dict[str, Any] = {}
    index = 0
    while True:
        key = f"k{index:03d}"
        remaining = size - encoded_size(value) - (len(key) + 6)  # ,"kNNN":"" (+1 if first)
        if not value:
            remaining += 1
        if remaining <= 2000:
            value[key] = "x" * remaining
            break
        value[key] = "x" * 1900
        index += 1
    assert encoded_size(value) == size
    return value


def test_result_bound_is_exactly_64_kib_of_canonical_json() -> None:
    assert MAX_ENCODED_BYTES == 65536
    assert result_bound_problems(_object_of_size(65536)) == []
    assert result_bound_problems(_object_of_size(65537)) == ["result: encoded size too large"]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"f": float("nan")}, "not finite"),
        ({"f": float("inf")}, "not finite"),
        ({"i": 2**53}, "integer out of range"),
        ({"s": "x" * 2049}, "string too long"),
        ({"k" * 65: 1}, "key too long"),
        ({"l": list(range(101))}, "too many items"),
        ({"a": [[[[[[[[1]]]]]]]]}, "nesting too deep"),
        ({"b": b"bytes"}, "not a JSON value"),
    ],
)
def test_each_result_bound_is_enforced(value: dict[str, Any], reason: str) -> None:
    assert any(reason in problem for problem in result_bound_problems(value))


def test_a_maximal_normalized_result_fits_and_a_huge_raw_one_is_cut_to_it(
    make_close: Factory, maximal_result: dict[str, Any]
) -> None:
    prepared = prepare_close(**make_close(result=maximal_result))
    assert prepared.intent.result is not None
    size = encoded_size(prepared.intent.result)
    assert 50_000 < size <= MAX_ENCODED_BYTES
    assert "tool_output" not in prepared.intent.result


def test_stored_intents_that_the_builder_would_not_produce_are_flagged(
    make_close: Factory, make_fail: Factory
) -> None:
    good = prepare_close(**make_close()).intent
    assert intent_problems(good) == []
    not_normalized = good.model_copy(update={"result": {"ok": True, "tool_output": "x"}})
    assert intent_problems(not_normalized) == ["result: not normalized"]
    oversized = good.model_copy(update={"result": _object_of_size(65537)})
    assert intent_problems(oversized) == ["result: encoded size too large"]
    failure = prepare_close(**make_fail()).intent
    unsanitized = failure.model_copy(update={"error": "two\nlines"})
    assert intent_problems(unsanitized) == ["error: not sanitized"]


def test_action_accepts_enum_and_string(make_close: Factory) -> None:
    by_enum = prepare_close(**make_close(action=CloseAction.complete))
    by_text = prepare_close(**make_close(action="complete"))
    assert by_enum == by_text


# -- the attempt a close was decided under (fencing) -------------------------------------------

RUN = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def test_the_attempt_is_kept_beside_the_intent_and_never_changes_its_digest(
    make_close: Factory,
) -> None:
    without = prepare_close(**make_close())
    first = prepare_close(**make_close(attempt=1))
    second = prepare_close(**make_close(attempt=2))
    assert (without.attempt, first.attempt, second.attempt) == (None, 1, 2)
    assert without.intent == first.intent == second.intent
    assert "attempt" not in first.intent.model_dump()
    assert len({without.intent_digest, first.intent_digest, second.intent_digest}) == 1
    assert first.key == second.key  # the key is still run id + transaction id only


def test_the_attempt_of_a_worker_transaction_id_is_taken_when_none_is_given(
    make_close: Factory,
) -> None:
    assert prepare_close(**make_close(transaction_id=f"rtx-{RUN}.4")).attempt == 4
    assert prepare_close(**make_close(transaction_id=f"rtx-{RUN}.4", attempt=4)).attempt == 4
    assert prepare_close(**make_close(transaction_id="txn-0001")).attempt is None


def test_the_gateway_transaction_id_names_the_claimed_attempt() -> None:
    for attempt in (1, 7, 2**31 - 1):
        run = ops_run(attempt=attempt)
        assert attempt_of_transaction(str(run.id), transaction_id_for(run)) == attempt


@pytest.mark.parametrize(
    "transaction_id",
    [
        f"rtx-{RUN}",
        f"rtx-{RUN}.",
        f"rtx-{RUN}.0",
        f"rtx-{RUN}.01",
        f"rtx-{RUN}.1.2",
        f"rtx-{RUN}.{2**31}",
        f"rtx-{RUN}x.1",
        f"RTX-{RUN}.1",
        "txn-0001",
        None,
    ],
)
def test_other_transaction_ids_name_no_attempt(transaction_id: str | None) -> None:
    assert attempt_of_transaction(RUN, transaction_id) is None


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"attempt": 0}, "attempt: must be a positive 32-bit integer"),
        ({"attempt": 2**31}, "attempt: must be a positive 32-bit integer"),
        ({"attempt": True}, "attempt: must be a positive 32-bit integer"),
        ({"attempt": "1"}, "attempt: must be a positive 32-bit integer"),
        (
            {"transaction_id": f"rtx-{RUN}.2", "attempt": 3},
            "attempt: differs from the one the transaction id names",
        ),
    ],
)
def test_a_bad_attempt_is_refused(
    make_close: Factory, overrides: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidCloseIntentError) as caught:
        prepare_close(**make_close(**overrides))
    assert caught.value.problems == (problem,)
