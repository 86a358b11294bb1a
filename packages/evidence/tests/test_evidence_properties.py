"""Properties of the normalizers over arbitrary and over plausible results.

Arbitrary JSON-ish values (NaN, infinities, huge ints, long and unencodable strings, deep
nesting, non-JSON objects) check totality, idempotence, boundedness and the allowlist;
plausible results built from the real keys, mixing valid and invalid values, exercise
every allowlist path and check that valid fields are preserved unchanged.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ops_evidence import (
    ACCEPTANCE,
    COMPACT_EVIDENCE_KEYS,
    EXECUTION_EVIDENCE_KEYS,
    EXECUTION_REFS_KEYS,
    MAX_DEPTH,
    MAX_ERROR_CHARS,
    MAX_IDENTIFIER_CHARS,
    MAX_INT,
    MIN_INT,
    REPOSITORY_TRANSACTION_KEYS,
    RESULT_KEYS,
    RESULT_REPORT,
    RESULT_REPORT_PROBLEMS,
    TOOL_EVENTS_COMPLETENESS,
    JsonValue,
    compact_execution_evidence,
    encoded_size,
    find_bound_violations,
    git_object_id,
    identifier,
    non_negative_int,
    non_negative_number,
    normalize_execution_evidence,
    normalize_repository_transaction,
    normalize_result,
    repo_path,
    sanitize_error,
    target_repo,
)
from ops_testsupport.factories import EVIDENCE_IDENTIFIER_FIELDS, TRANSACTION_IDENTIFIER_FIELDS

BOUNDED = settings(max_examples=200, deadline=None)

# -- Arbitrary values ---------------------------------------------------------------------

surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
any_text = st.one_of(
    st.text(max_size=20),
    st.text(st.characters(codec=None) | surrogates, max_size=20),
    # Long strings by repetition: cheap to generate, past every length limit.
    st.builds(lambda c, n: c * n, st.characters(), st.integers(2000, 5000)),
)
any_int = st.one_of(
    st.integers(),
    st.integers(MAX_INT - 2, MAX_INT + 2),
    st.integers(MIN_INT - 2, MIN_INT + 2),
    st.integers(2**60, 2**200),
)
any_float = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.one_of(st.none(), st.booleans(), any_int, any_float, any_text)

ALL_KEYS = sorted(
    RESULT_KEYS
    | EXECUTION_EVIDENCE_KEYS
    | EXECUTION_REFS_KEYS
    | REPOSITORY_TRANSACTION_KEYS
    | {"evidence", "tool_output", "tool_error", "prompt", "messages", "api_key", "token"}
    | {"provider_response", "headers", "allowed_paths", "repository_grant"}
)
any_keys = st.one_of(st.sampled_from(ALL_KEYS), st.text(max_size=8), any_text)

json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6), st.dictionaries(any_keys, children, max_size=6)
    ),
    max_leaves=40,
)


def nest(value: object, depth: int, as_dict: bool) -> object:
    for _ in range(depth):
        value = {"evidence": value} if as_dict else [value]
    return value


deep_values = st.builds(nest, json_values, st.integers(0, 3 * MAX_DEPTH), st.booleans())
non_json = st.one_of(
    st.tuples(scalars),
    st.frozensets(st.integers(), max_size=3),
    st.binary(max_size=5),
    st.builds(object),
    st.dictionaries(st.integers(), scalars, max_size=3),
)
anything = st.one_of(
    json_values,
    deep_values,
    non_json,
    st.dictionaries(any_keys, st.one_of(json_values, non_json), max_size=8),
)

# -- Plausible results ----------------------------------------------------------------------

ascii_token = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=MAX_IDENTIFIER_CHARS
)
valid_identifier = st.one_of(
    st.text(string.ascii_letters + string.digits + "-._@:", min_size=1, max_size=40), ascii_token
)
valid_git_id = st.text("0123456789abcdef", min_size=7, max_size=64)
path_segment = st.text(
    st.characters(blacklist_categories=("Cc", "Cf", "Cs"), blacklist_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", "..") and s.casefold() != ".git")
valid_path = st.lists(path_segment, min_size=1, max_size=5).map("/".join)
repo_segment = st.text(
    string.ascii_letters + string.digits + "._-", min_size=1, max_size=20
).filter(lambda s: s not in (".", ".."))
valid_target_repo = st.lists(repo_segment, min_size=1, max_size=3).map("/".join)
valid_count = st.integers(0, MAX_INT)
valid_number = st.one_of(valid_count, st.floats(min_value=0, allow_infinity=False))


def valid_list(item: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    # Small enough that every valid list is within the item and byte budgets.
    return st.lists(item, max_size=8)


def sometimes_invalid(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, valid, scalars, json_values)


def mixed_list(item: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.one_of(valid_list(item), st.lists(st.one_of(item, scalars), max_size=8), scalars)


JUNK_KEYS = {
    "tool_output": any_text,
    "tool_error": any_text,
    "prompt": any_text,
    "messages": json_values,
    "provider_response": json_values,
    "api_key": any_text,
    "token": any_text,
    "headers": json_values,
    "unknown": json_values,
}

VALID_REFS: dict[str, st.SearchStrategy[Any]] = {
    "correlation_id": valid_identifier,
    "causation_id": valid_identifier,
    "request_ref": valid_identifier,
    "goal_refs": valid_list(valid_identifier),
    "initiative_refs": valid_list(valid_identifier),
}
VALID_EVIDENCE_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    **dict.fromkeys(EVIDENCE_IDENTIFIER_FIELDS, valid_identifier),
    "tool_events_completeness": st.sampled_from(sorted(TOOL_EVENTS_COMPLETENESS)),
    "result_report": st.sampled_from(sorted(RESULT_REPORT)),
    "result_report_problem": st.sampled_from(sorted(RESULT_REPORT_PROBLEMS)),
    "duration_s": valid_number,
    "tokens_spent": valid_count,
    "input_tokens": valid_count,
    "output_tokens": valid_count,
    "tool_events_count": valid_count,
    "head_after": valid_git_id,
    "commit_refs": valid_list(valid_git_id),
    "artifact_refs": valid_list(valid_path),
}
VALID_TRANSACTION: dict[str, st.SearchStrategy[Any]] = {
    **dict.fromkeys(TRANSACTION_IDENTIFIER_FIELDS, valid_identifier),
    "acceptance": st.sampled_from(sorted(ACCEPTANCE)),
    "accepted_commits": valid_list(valid_git_id),
    "accepted_paths": valid_list(valid_path),
}
VALID_RESULT_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "ok": st.booleans(),
    "path": valid_path,
    "head_after": valid_git_id,
    "target_repo": valid_target_repo,
    "committed": st.booleans(),
}


def optional_dict(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


def valid_refs() -> st.SearchStrategy[dict[str, Any]]:
    return optional_dict(VALID_REFS).filter(bool)


def valid_evidence() -> st.SearchStrategy[dict[str, Any]]:
    return optional_dict({**VALID_EVIDENCE_SCALARS, "refs": valid_refs()}).filter(bool)


def valid_transaction() -> st.SearchStrategy[dict[str, Any]]:
    return optional_dict(VALID_TRANSACTION).filter(bool)


def valid_result() -> st.SearchStrategy[dict[str, Any]]:
    """A stored-shape result every field of which is valid, so it normalizes to itself."""
    return optional_dict(
        {
            **VALID_RESULT_SCALARS,
            "execution_evidence": valid_evidence(),
            "repository_transaction": valid_transaction(),
        }
    )


LIST_ITEMS: dict[str, st.SearchStrategy[str]] = {
    "goal_refs": valid_identifier,
    "initiative_refs": valid_identifier,
    "commit_refs": valid_git_id,
    "accepted_commits": valid_git_id,
    "artifact_refs": valid_path,
    "accepted_paths": valid_path,
}
LIST_VALIDATORS: dict[str, Callable[[object], object]] = {
    "goal_refs": identifier,
    "initiative_refs": identifier,
    "commit_refs": git_object_id,
    "accepted_commits": git_object_id,
    "artifact_refs": repo_path,
    "accepted_paths": repo_path,
}


def mixed(fields: dict[str, st.SearchStrategy[Any]]) -> dict[str, st.SearchStrategy[Any]]:
    """The same keys, each with a valid value often and an invalid one otherwise."""
    return {
        key: mixed_list(LIST_ITEMS[key]) if key in LIST_ITEMS else sometimes_invalid(valid)
        for key, valid in fields.items()
    }


plausible_refs = optional_dict({**mixed(VALID_REFS), "workflow": json_values, "email": any_text})
plausible_evidence = optional_dict(
    {**mixed(VALID_EVIDENCE_SCALARS), "refs": st.one_of(plausible_refs, scalars), **JUNK_KEYS}
)
plausible_transaction = optional_dict(
    {
        **mixed(VALID_TRANSACTION),
        "allowed_paths": valid_list(valid_path),
        "repository_grant": json_values,
        **JUNK_KEYS,
    }
)
plausible_results = optional_dict(
    {
        **mixed(VALID_RESULT_SCALARS),
        "evidence": st.one_of(plausible_evidence, scalars),
        "execution_evidence": st.one_of(plausible_evidence, scalars),
        "repository_transaction": st.one_of(plausible_transaction, scalars),
        **JUNK_KEYS,
    }
)
inputs = st.one_of(anything, plausible_results, valid_result())

# -- Shape of an output ---------------------------------------------------------------------


def assert_allowlisted(result: dict[str, JsonValue]) -> None:
    assert set(result) <= RESULT_KEYS
    evidence = result.get("execution_evidence")
    if evidence is not None:
        assert isinstance(evidence, dict) and evidence
        assert set(evidence) <= EXECUTION_EVIDENCE_KEYS
        refs = evidence.get("refs")
        if refs is not None:
            assert isinstance(refs, dict) and refs
            assert set(refs) <= EXECUTION_REFS_KEYS
    transaction = result.get("repository_transaction")
    if transaction is not None:
        assert isinstance(transaction, dict) and transaction
        assert set(transaction) <= REPOSITORY_TRANSACTION_KEYS
    # Every leaf is a bool, number, string or a list of strings: no blob survives.
    for leaf in _leaves(result):
        assert isinstance(leaf, bool | int | float | str)


def _leaves(value: JsonValue) -> list[JsonValue]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        assert all(isinstance(item, str) for item in value)
        return list(value)
    return [value]


# -- Properties ---------------------------------------------------------------------------


@BOUNDED
@given(inputs)
def test_normalize_result_is_total_bounded_allowlisted_and_idempotent(raw: object) -> None:
    result = normalize_result(raw)
    assert find_bound_violations(result) == []
    assert_allowlisted(result)
    assert normalize_result(result) == result
    assert json.loads(json.dumps(result)) == result


def assert_normalized_section(
    normalize: Callable[[object], dict[str, JsonValue] | None], raw: object, key: str
) -> dict[str, JsonValue] | None:
    """What `normalize` makes of `raw` for the result's `key`: absent, or a non-empty,
    bounded, allowlisted section that normalizes to itself."""
    section = normalize(raw)
    if section is not None:
        assert section
        assert find_bound_violations(section) == []
        assert_allowlisted({key: section})
    assert normalize(section) == section
    return section


@BOUNDED
@given(st.one_of(anything, plausible_evidence))
def test_normalize_execution_evidence_properties(raw: object) -> None:
    evidence = assert_normalized_section(normalize_execution_evidence, raw, "execution_evidence")
    compact = compact_execution_evidence(raw)
    assert set(compact) <= COMPACT_EVIDENCE_KEYS
    assert compact == {k: v for k, v in (evidence or {}).items() if k in COMPACT_EVIDENCE_KEYS}
    assert compact_execution_evidence(compact) == compact


@BOUNDED
@given(st.one_of(anything, plausible_transaction))
def test_normalize_repository_transaction_properties(raw: object) -> None:
    assert_normalized_section(normalize_repository_transaction, raw, "repository_transaction")


@BOUNDED
@given(valid_result())
def test_a_fully_valid_result_is_preserved(raw: dict[str, Any]) -> None:
    assert normalize_result(raw) == raw
    if "execution_evidence" in raw:
        glas = {k: v for k, v in raw.items() if k != "execution_evidence"}
        glas["evidence"] = raw["execution_evidence"]
        glas["tool_output"] = "dropped before persistence"
        assert normalize_result(glas) == raw


SCALAR_VALIDATORS: dict[str, Callable[[object], object]] = {
    "ok": lambda v: v if type(v) is bool else None,
    "committed": lambda v: v if type(v) is bool else None,
    "path": repo_path,
    "head_after": git_object_id,
    "target_repo": target_repo,
}
EVIDENCE_VALIDATORS: dict[str, Callable[[object], object]] = {
    **dict.fromkeys(EVIDENCE_IDENTIFIER_FIELDS, identifier),
    "duration_s": non_negative_number,
    **dict.fromkeys(
        ("tokens_spent", "input_tokens", "output_tokens", "tool_events_count"), non_negative_int
    ),
    "head_after": git_object_id,
    "tool_events_completeness": lambda v: (
        v if type(v) is str and v in TOOL_EVENTS_COMPLETENESS else None
    ),
}


def assert_valid_fields_kept(
    source: object,
    kept: object,
    scalars: Mapping[str, Callable[[object], object]],
    lists: tuple[str, ...] = (),
) -> None:
    """`kept` is a dict; where `source` is one too, each of `scalars` that its validator
    accepts stands unchanged in `kept`, and one `source` lacks `kept` lacks too; each of
    `lists` whose every item is valid (by LIST_VALIDATORS) stands unchanged (the lists
    drawn are small: within every budget)."""
    assert isinstance(kept, dict)
    if not isinstance(source, dict):
        return
    for key, validate in scalars.items():
        if key in source and validate(source[key]) is not None:
            assert kept[key] == source[key]
        elif key not in source:
            assert key not in kept
    for key in lists:
        items = source.get(key)
        validate = LIST_VALIDATORS[key]
        if isinstance(items, list) and all(validate(item) is not None for item in items):
            assert kept[key] == items


@BOUNDED
@given(plausible_results)
def test_each_valid_field_of_a_mixed_result_is_preserved(raw: dict[str, Any]) -> None:
    result = normalize_result(raw)
    assert_valid_fields_kept(raw, result, SCALAR_VALIDATORS)
    source = raw.get("evidence")
    if not isinstance(source, dict):
        source = raw.get("execution_evidence")
    evidence = result.get("execution_evidence", {})
    assert_valid_fields_kept(
        source, evidence, EVIDENCE_VALIDATORS, ("commit_refs", "artifact_refs")
    )
    if isinstance(source, dict) and isinstance(evidence, dict):
        assert_valid_fields_kept(
            source.get("refs"),
            evidence.get("refs", {}),
            dict.fromkeys(("correlation_id", "causation_id", "request_ref"), identifier),
            ("goal_refs", "initiative_refs"),
        )
    transaction_source = raw.get("repository_transaction")
    assert_valid_fields_kept(
        transaction_source,
        result.get("repository_transaction", {}),
        dict.fromkeys(("transaction_id", "grant_id", "acceptance_policy_id"), identifier),
        ("accepted_commits", "accepted_paths"),
    )
    if not isinstance(transaction_source, dict):
        assert "repository_transaction" not in result


@BOUNDED
@given(st.one_of(any_text, scalars, st.text(max_size=MAX_ERROR_CHARS + 50)))
def test_sanitize_error_is_total_bounded_and_idempotent(text: object) -> None:
    cleaned = sanitize_error(text)
    assert 1 <= len(cleaned) <= MAX_ERROR_CHARS
    assert cleaned == cleaned.strip()
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) <= 0x9F for c in cleaned)
    assert find_bound_violations(cleaned) == []
    assert sanitize_error(cleaned) == cleaned


@BOUNDED
@given(anything)
def test_find_bound_violations_is_total_and_agrees_with_the_encoder(value: object) -> None:
    violations = find_bound_violations(value)
    if not violations:
        assert encoded_size(value) <= 65536
        assert json.loads(json.dumps(value)) == value


@BOUNDED
@given(st.floats(min_value=0, allow_infinity=False))
def test_a_non_negative_float_encodes_in_at_most_23_bytes(value: float) -> None:
    # The size proof in test_evidence_normalize.py relies on this.
    assert encoded_size(value) <= 23
