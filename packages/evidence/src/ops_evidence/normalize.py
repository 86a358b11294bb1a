"""Turn whatever a worker or Glas sends as a run `result` into storable evidence.

Only allowlisted fields with valid values survive; everything else (tool output, tool
errors, prompts, messages, provider responses, credentials, unknown keys and blobs,
undeclared refs) is dropped. A field is present in the output only if it was present and
valid in the input, so absent stays absent, 0 stays 0 and False stays False. Every
function is total and idempotent, and read projections run stored rows through them
again, so a stored result normalizes to itself.

Size: no output can exceed MAX_ENCODED_BYTES. Per field, at most: an identifier 514
bytes (256 escaped `"` plus quotes), a path 4,098 (1,024 four-byte characters), a git
id 66, a target repo 258, a number 23, each of the six lists MAX_LIST_ENCODED_BYTES
(8,192) and `network_egress` MAX_NETWORK_EGRESS_BYTES (1,280). Summed over every
allowlisted field with its keys and separators that is 65,100 bytes (the two
`result_report*` choices included), under the 65,536 bound; `test_evidence_normalize.py`
checks the sum and measures a maximal result. A new field must fit in the 436 bytes left.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from ops_evidence.bounds import JsonValue
from ops_evidence.egress import network_egress
from ops_evidence.fields import (
    accepted_commit_list,
    accepted_path_list,
    git_object_id,
    git_object_id_list,
    identifier,
    identifier_list,
    non_negative_int,
    non_negative_number,
    one_of,
    repo_path,
    repo_path_list,
    target_repo,
)

__all__ = [
    "ACCEPTANCE",
    "COMPACT_EVIDENCE_KEYS",
    "EXECUTION_EVIDENCE_KEYS",
    "EXECUTION_REFS_KEYS",
    "REPOSITORY_TRANSACTION_KEYS",
    "RESULT_KEYS",
    "RESULT_REPORT",
    "RESULT_REPORT_PROBLEMS",
    "TOOL_EVENTS_COMPLETENESS",
    "compact_execution_evidence",
    "normalize_execution_evidence",
    "normalize_repository_transaction",
    "normalize_result",
]

_Validator = Callable[[object], JsonValue]

TOOL_EVENTS_COMPLETENESS = frozenset({"complete", "partial", "unavailable"})
# What became of the report an approach wrote to its result file (rein-aharness,
# docs/agent-runs.md): every reported field used, some dropped, or none (and why).
RESULT_REPORT = frozenset({"accepted", "partial", "refused"})
RESULT_REPORT_PROBLEMS = frozenset(
    {
        "not_a_regular_file",
        "symlink",
        "too_large",
        "unreadable",
        "not_json",
        "not_finite",
        "duplicate_key",
        "too_deep",
        "not_an_object",
        "out_of_bounds",
    }
)
ACCEPTANCE = frozenset({"accepted", "rejected"})


def _bool(value: object) -> bool | None:
    return value if type(value) is bool else None


def _choice(choices: frozenset[str]) -> _Validator:
    return lambda value: one_of(value, choices)


_REFS_FIELDS: Mapping[str, _Validator] = MappingProxyType(
    {
        "correlation_id": identifier,
        "causation_id": identifier,
        "request_ref": identifier,
        "goal_refs": identifier_list,
        "initiative_refs": identifier_list,
    }
)


def _refs(raw: object) -> dict[str, JsonValue] | None:
    # Only declared attribution refs; any other key in `refs` is undeclared and dropped.
    return _pick(raw, _REFS_FIELDS) or None


_EXECUTION_EVIDENCE_FIELDS: Mapping[str, _Validator] = MappingProxyType(
    {
        # The Glas 1.0 constellation and outcome.
        "request_id": identifier,
        "contract_version": identifier,
        "profile_ref": identifier,
        "rein_id": identifier,
        "rein_version": identifier,
        "resolved_model": identifier,
        "sandbox_profile": identifier,
        "outcome": identifier,
        "tool_events_completeness": _choice(TOOL_EVENTS_COMPLETENESS),
        # Measurements.
        "duration_s": non_negative_number,
        "tokens_spent": non_negative_int,
        "input_tokens": non_negative_int,
        "output_tokens": non_negative_int,
        "tool_events_count": non_negative_int,
        # Commit and artifact references.
        "head_after": git_object_id,
        "commit_refs": git_object_id_list,
        "artifact_refs": repo_path_list,
        "refs": _refs,
        # The approach's own report (result file), how it was taken.
        "result_report": _choice(RESULT_REPORT),
        "result_report_problem": _choice(RESULT_REPORT_PROBLEMS),
        # What the sandbox's network did (egress.py), bounded to 1,280 bytes.
        "network_egress": network_egress,
    }
)

_REPOSITORY_TRANSACTION_FIELDS: Mapping[str, _Validator] = MappingProxyType(
    {
        "transaction_id": identifier,
        "correlation_id": identifier,
        "baseline_digest": identifier,
        # the digest of the changes bundle the worker uploaded (docs/changes.md)
        "changes_digest": identifier,
        "grant_id": identifier,
        "acceptance_policy_id": identifier,
        "external_metrics_id": identifier,
        "acceptance": _choice(ACCEPTANCE),
        "accepted_commits": accepted_commit_list,
        "accepted_paths": accepted_path_list,
    }
)

_RESULT_FIELDS: Mapping[str, _Validator] = MappingProxyType(
    {
        "ok": _bool,
        "path": repo_path,
        "head_after": git_object_id,
        "target_repo": target_repo,
        "committed": _bool,
        "execution_evidence": lambda value: normalize_execution_evidence(value),
        "repository_transaction": lambda value: normalize_repository_transaction(value),
    }
)

_COMPACT_EVIDENCE_KEYS = (
    "profile_ref",
    "rein_id",
    "rein_version",
    "resolved_model",
    "sandbox_profile",
    "outcome",
)

# The allowlists, for callers and tests that check a value against them.
RESULT_KEYS = frozenset(_RESULT_FIELDS)
EXECUTION_EVIDENCE_KEYS = frozenset(_EXECUTION_EVIDENCE_FIELDS)
EXECUTION_REFS_KEYS = frozenset(_REFS_FIELDS)
REPOSITORY_TRANSACTION_KEYS = frozenset(_REPOSITORY_TRANSACTION_FIELDS)
COMPACT_EVIDENCE_KEYS = frozenset(_COMPACT_EVIDENCE_KEYS)


def normalize_result(raw: object) -> dict[str, JsonValue]:
    """The allowlisted evidence of a run result; `{}` for anything that is not a dict.

    A Glas `GatewayResult` carries its envelope as `evidence`; a stored result carries
    it as `execution_evidence`. A dict `evidence` wins, so both shapes land on the same
    stored key and a stored result normalizes to itself.
    """
    source = _string_keyed(raw, RESULT_KEYS | {"evidence"})
    evidence = source.pop("evidence", None)
    if type(evidence) is dict:
        source["execution_evidence"] = evidence
    return _pick(source, _RESULT_FIELDS)


def normalize_execution_evidence(raw: object) -> dict[str, JsonValue] | None:
    """The Glas 1.0 allowlist of `result.execution_evidence`; None when nothing survives."""
    return _pick(raw, _EXECUTION_EVIDENCE_FIELDS) or None


def normalize_repository_transaction(raw: object) -> dict[str, JsonValue] | None:
    """The allowlist of `result.repository_transaction`; None when nothing survives.

    Raw grant patterns (`allowed_paths`, `repository_grant`) are not evidence of what
    happened and are dropped with every other undeclared field.
    """
    return _pick(raw, _REPOSITORY_TRANSACTION_FIELDS) or None


def compact_execution_evidence(evidence: object) -> dict[str, JsonValue]:
    """The profile, rein, model, sandbox and outcome shown on operator pages.

    Accepts raw or normalized evidence; it is normalized first, so a historic row
    cannot show anything the allowlist would not store.
    """
    normalized = normalize_execution_evidence(evidence) or {}
    return {key: normalized[key] for key in _COMPACT_EVIDENCE_KEYS if key in normalized}


def _string_keyed(raw: object, wanted: frozenset[str]) -> dict[str, object]:
    """The wanted entries of `raw` if it is an exact dict, read without running its code.

    Looking a key up in a caller's dict would compare it with that dict's keys, which may
    be objects with their own `__eq__`; iterating an exact dict and testing exact-str keys
    against our own set never calls anything but `str` methods.
    """
    if type(raw) is not dict:
        return {}
    return {key: value for key, value in raw.items() if type(key) is str and key in wanted}


def _pick(raw: object, fields: Mapping[str, _Validator]) -> dict[str, JsonValue]:
    source = _string_keyed(raw, frozenset(fields))
    picked: dict[str, JsonValue] = {}
    for key, validate in fields.items():
        if key in source:
            cleaned = validate(source[key])
            if cleaned is not None:
                picked[key] = cleaned
    return picked
