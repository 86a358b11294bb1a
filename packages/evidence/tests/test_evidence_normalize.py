"""Examples for the result allowlist, from the spec's Complete / fail body onwards."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ops_evidence import (
    EXECUTION_EVIDENCE_KEYS,
    EXECUTION_REFS_KEYS,
    MAX_COLLECTION_ITEMS,
    MAX_ENCODED_BYTES,
    MAX_ERROR_CHARS,
    MAX_IDENTIFIER_CHARS,
    MAX_INT,
    MAX_LIST_ENCODED_BYTES,
    MAX_PATH_CHARS,
    MAX_TARGET_REPO_CHARS,
    REPOSITORY_TRANSACTION_KEYS,
    RESULT_KEYS,
    compact_execution_evidence,
    encoded_size,
    find_bound_violations,
    normalize_execution_evidence,
    normalize_repository_transaction,
    normalize_result,
    sanitize_error,
)
from ops_evidence.egress import MAX_NETWORK_EGRESS_BYTES
from ops_evidence.fields import bounded_list, git_object_id, repo_path
from ops_testsupport.factories import (
    EVIDENCE_IDENTIFIER_FIELDS,
    TRANSACTION_IDENTIFIER_FIELDS,
    gateway_result,
    glas_evidence,
)

GLAS_EVIDENCE: dict[str, Any] = glas_evidence()

GATEWAY_RESULT: dict[str, Any] = gateway_result()

# Sixteen destinations with 253-character hosts and the largest counts: clipped to fit.
MAXIMAL_EGRESS: dict[str, Any] = {
    "mode": "allowlist",
    **dict.fromkeys(("allowed", "refused", "failed", "bytes_up", "bytes_down"), MAX_INT),
    "destinations": [
        {
            "host": "h" * 253,
            "port": 65535,
            "outcome": "refused",
            "reason": "too_many_connections",
            **dict.fromkeys(("connections", "bytes_up", "bytes_down"), MAX_INT),
        }
    ]
    * 16,
}


def test_spec_gateway_result_keeps_every_evidence_field_and_drops_tool_output() -> None:
    assert normalize_result(GATEWAY_RESULT) == {"ok": True, "execution_evidence": GLAS_EVIDENCE}


def test_zero_stays_zero_and_unavailable_stays_unavailable() -> None:
    evidence = normalize_execution_evidence(GLAS_EVIDENCE)
    assert evidence is not None
    assert evidence["tool_events_count"] == 0
    assert evidence["tool_events_completeness"] == "unavailable"


def test_a_stored_result_normalizes_to_itself() -> None:
    stored = normalize_result(GATEWAY_RESULT)
    assert normalize_result(stored) == stored


def test_simple_executor_result() -> None:
    raw = {
        "ok": True,
        "path": "briefs/2024-05-01.md",
        "head_after": "4f2a9c1",
        "target_repo": "coulomb/research",
        "committed": False,
    }
    assert normalize_result(raw) == raw


def test_absent_stays_absent() -> None:
    assert normalize_result({"ok": False}) == {"ok": False}
    assert normalize_execution_evidence({"outcome": "failed"}) == {"outcome": "failed"}
    assert normalize_result({}) == {}


@pytest.mark.parametrize("raw", [None, [], "ok", 1, ("ok", True), {1: True}])
def test_non_dict_or_foreign_keys_give_nothing(raw: object) -> None:
    assert normalize_result(raw) == {}
    assert normalize_execution_evidence(raw) is None
    assert normalize_repository_transaction(raw) is None


def test_evidence_wins_over_execution_evidence_only_when_it_is_a_dict() -> None:
    both = {"evidence": {"rein_id": "glas"}, "execution_evidence": {"rein_id": "stored"}}
    assert normalize_result(both) == {"execution_evidence": {"rein_id": "glas"}}
    not_dict = {"evidence": "x", "execution_evidence": {"rein_id": "stored"}}
    assert normalize_result(not_dict) == {"execution_evidence": {"rein_id": "stored"}}


def test_empty_evidence_and_transaction_are_omitted() -> None:
    raw = {"ok": True, "evidence": {"tool_output": "x"}, "repository_transaction": {"x": 1}}
    assert normalize_result(raw) == {"ok": True}


FORBIDDEN = {
    "tool_output": "raw stream",
    "tool_error": "Traceback ...",
    "prompt": "You are ...",
    "messages": [{"role": "user", "content": "secret plan"}],
    "provider_response": {"choices": [{"text": "..."}]},
    "api_key": "sk-live-123",
    "token": "ghp_abc",
    "authorization": "Bearer abc",
    "headers": {"Authorization": "Bearer abc"},
    "password": "hunter2",
    "unknown_blob": {"nested": {"deeper": ["x"]}},
}


def test_forbidden_fields_are_dropped_at_every_level() -> None:
    raw = {
        "ok": True,
        **FORBIDDEN,
        "evidence": {
            **GLAS_EVIDENCE,
            **FORBIDDEN,
            "refs": {"correlation_id": "c-1", **FORBIDDEN},
        },
        "repository_transaction": {"transaction_id": "t-1", **FORBIDDEN},
    }
    assert normalize_result(raw) == {
        "ok": True,
        "execution_evidence": {**GLAS_EVIDENCE, "refs": {"correlation_id": "c-1"}},
        "repository_transaction": {"transaction_id": "t-1"},
    }


def test_secrets_cannot_hide_inside_allowlisted_fields() -> None:
    raw = {
        "path": {"api_key": "sk"},
        "evidence": {"outcome": {"prompt": "p"}, "commit_refs": [{"token": "t"}]},
    }
    assert normalize_result(raw) == {}


def test_only_declared_refs_survive() -> None:
    refs = {
        "correlation_id": "corr-1",
        "causation_id": "cause-1",
        "request_ref": "req-1",
        "goal_refs": ["goal-a", "goal-b"],
        "initiative_refs": ["init-1"],
        "customer_email": "a@example.com",
        "workflow_run": "wf-7",
    }
    evidence = normalize_execution_evidence({"refs": refs})
    assert evidence == {"refs": {k: v for k, v in refs.items() if k in EXECUTION_REFS_KEYS}}
    assert normalize_execution_evidence({"refs": {"undeclared": "x"}}) is None


def test_bool_is_not_a_count_or_a_duration() -> None:
    evidence = {"tokens_spent": True, "tool_events_count": False, "duration_s": True}
    assert normalize_execution_evidence(evidence) is None


def test_bools_stay_bools_and_false_stays_false() -> None:
    assert normalize_result({"ok": False, "committed": False}) == {"ok": False, "committed": False}
    assert normalize_result({"ok": 1, "committed": "true"}) == {}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), -1.0])
def test_non_finite_or_negative_measurements_are_dropped(bad: float) -> None:
    evidence = normalize_execution_evidence({"duration_s": bad, "tokens_spent": 5})
    assert evidence == {"tokens_spent": 5}


def test_huge_ints_are_dropped() -> None:
    evidence = {"tokens_spent": MAX_INT + 1, "input_tokens": 10**400, "output_tokens": MAX_INT}
    assert normalize_execution_evidence(evidence) == {"output_tokens": MAX_INT}


def test_tool_events_completeness_is_a_closed_set() -> None:
    for value in ("complete", "partial", "unavailable"):
        evidence = normalize_execution_evidence({"tool_events_completeness": value})
        assert evidence == {"tool_events_completeness": value}
    assert normalize_execution_evidence({"tool_events_completeness": "all"}) is None


def test_commit_and_artifact_refs() -> None:
    evidence = {
        "head_after": "a1b2c3d4",
        "commit_refs": ["a1b2c3d4", "NOT-A-SHA", "e5f6a7b8"],
        "artifact_refs": ["briefs/x.md", "../etc/passwd", ".git/config"],
    }
    assert normalize_execution_evidence(evidence) == {
        "head_after": "a1b2c3d4",
        "commit_refs": ["a1b2c3d4", "e5f6a7b8"],
        "artifact_refs": ["briefs/x.md"],
    }


def test_repository_transaction_allowlist() -> None:
    transaction = {
        "transaction_id": "tx-1",
        "correlation_id": "corr-1",
        "baseline_digest": "sha256:abcd",
        "changes_digest": "sha256:" + "0" * 64,
        "grant_id": "grant-1",
        "acceptance_policy_id": "policy-1",
        "external_metrics_id": "metrics-1",
        "acceptance": "accepted",
        "accepted_commits": ["abcdef0"],
        "accepted_paths": ["docs/a.md"],
    }
    raw = {
        **transaction,
        "allowed_paths": ["docs/"],
        "repository_grant": {"version": "1", "allowed_paths": ["docs/"]},
        "provider_response": {"x": 1},
        "tool_output": "diff --git ...",
    }
    assert normalize_repository_transaction(raw) == transaction
    assert normalize_repository_transaction({"acceptance": "maybe"}) is None


def test_inputs_are_not_mutated() -> None:
    raw = copy.deepcopy({**GATEWAY_RESULT, "repository_transaction": {"x": [1]}})
    before = copy.deepcopy(raw)
    normalize_result(raw)
    assert raw == before


def test_compact_evidence_for_operator_pages() -> None:
    compact = {
        "profile_ref": "harness.agent-dev@1.0.0",
        "rein_id": "rein-aharness",
        "rein_version": "0.1.0",
        "resolved_model": "claude-sonnet-4-6",
        "sandbox_profile": "profile.bwrap-local",
        "outcome": "succeeded",
    }
    assert compact_execution_evidence(GLAS_EVIDENCE) == compact
    assert compact_execution_evidence(normalize_execution_evidence(GLAS_EVIDENCE)) == compact
    assert compact_execution_evidence({"rein_id": " bad", "outcome": "ok", "x": 1}) == {
        "outcome": "ok"
    }
    assert compact_execution_evidence(None) == {}


class EvilKey:
    """A key whose hash collides with an allowlisted key and whose comparison raises."""

    def __hash__(self) -> int:
        return hash("ok")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")


class EvilDict(dict[str, object]):
    def items(self) -> Any:
        raise RuntimeError("items")

    def get(self, key: str, default: object = None) -> Any:
        raise RuntimeError("get")

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("getitem")


class EvilList(list[object]):
    def __iter__(self) -> Any:
        raise RuntimeError("iter")


class EvilStr(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    __hash__ = str.__hash__


@pytest.mark.parametrize(
    "raw",
    [
        {EvilKey(): True},
        EvilDict(ok=True),
        {"ok": True, "evidence": EvilDict(rein_id="x")},
        {"evidence": {"commit_refs": EvilList(["abcdef0"])}},
        {"evidence": {"rein_id": EvilStr("x"), "outcome": EvilStr("unavailable")}},
        {EvilStr("ok"): True},
    ],
)
def test_hostile_objects_do_not_make_normalization_raise(raw: object) -> None:
    result = normalize_result(raw)
    assert find_bound_violations(result) == []
    assert find_bound_violations(raw) != []


def test_the_invisible_formatting_table_is_this_pythons_unicode() -> None:
    import sys
    import unicodedata

    from ops_evidence.error_text import INVISIBLE_FORMATTING

    listed = {code for low, high in INVISIBLE_FORMATTING for code in range(low, high + 1)}
    wanted = {
        code
        for code in range(0xA0, sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in ("Cf", "Zl", "Zp")
    }
    assert listed == wanted


def test_sanitize_error() -> None:
    assert sanitize_error("llm timeout") == "llm timeout"
    assert sanitize_error("line1\nline2\x00\x7f\x85end") == "line1 line2   end"
    assert sanitize_error("  padded\t") == "padded"
    assert sanitize_error("lone \ud800 surrogate") == "lone   surrogate"
    assert sanitize_error("x" * (MAX_ERROR_CHARS + 10)) == "x" * MAX_ERROR_CHARS
    # bidi controls and invisible formatting are neutralised (Trojan Source)
    assert sanitize_error("ok\u202eexe.txt\u202c") == "ok exe.txt"
    assert sanitize_error("a\u2066b\u2069c\u200bd\u200de\ufefff\u2028g") == "a b c d e f g"
    assert sanitize_error("tag\U000e0041\U000e0042") == "tag"
    assert sanitize_error("\u061cerror\u00ad") == "error"
    assert sanitize_error("déjà vu: 障害 ✓") == "déjà vu: 障害 ✓"  # visible text stays
    for empty in ("", "   ", "\x00\n", None, 42, b"bytes", ["error"]):
        assert sanitize_error(empty) == "error"


# -- The 64 KiB proof -------------------------------------------------------------------
# Worst-case encoded bytes of one value of each kind. An identifier is printable ASCII,
# so its worst character is `"` or `\` (escaped to two bytes); a path may hold any
# character the encoder does not escape (controls are refused), at most four UTF-8
# bytes each; a non-negative float's repr is at most 23 characters.
WORST_IDENTIFIER = '"' * MAX_IDENTIFIER_CHARS
WORST_PATH = "\U0001f600" * MAX_PATH_CHARS
WORST_GIT_ID = "f" * 64
WORST_TARGET_REPO = "r" * MAX_TARGET_REPO_CHARS
WORST_FLOAT = 2.2250738585072014e-308
VALUE_BOUND = {
    "identifier": 2 * MAX_IDENTIFIER_CHARS + 2,
    "path": 4 * MAX_PATH_CHARS + 2,
    "git_id": 64 + 2,
    "target_repo": MAX_TARGET_REPO_CHARS + 2,
    "bool": len("false"),
    "number": 23,
    # the longest choice: "not_a_regular_file" (result_report_problem)
    "choice": len('"not_a_regular_file"'),
    "list": MAX_LIST_ENCODED_BYTES,
    "egress": MAX_NETWORK_EGRESS_BYTES,
}


def test_worst_case_values_are_valid_and_as_large_as_claimed() -> None:
    assert encoded_size(WORST_IDENTIFIER) == VALUE_BOUND["identifier"]
    assert encoded_size(WORST_PATH) == VALUE_BOUND["path"]
    assert encoded_size(WORST_GIT_ID) == VALUE_BOUND["git_id"]
    assert encoded_size(WORST_TARGET_REPO) == VALUE_BOUND["target_repo"]
    assert encoded_size(WORST_FLOAT) == VALUE_BOUND["number"]
    assert encoded_size(MAX_INT) < VALUE_BOUND["number"]


def object_bound(fields: dict[str, int]) -> int:
    """Worst-case bytes of `{"key":value,...}` given each value's worst case."""
    entries = sum(len(key) + 3 + size for key, size in fields.items())  # "key":value
    return 2 + entries + len(fields) - 1


REFS_KINDS = {
    "correlation_id": "identifier",
    "causation_id": "identifier",
    "request_ref": "identifier",
    "goal_refs": "list",
    "initiative_refs": "list",
}
EVIDENCE_KINDS = {
    **dict.fromkeys(EVIDENCE_IDENTIFIER_FIELDS, "identifier"),
    "tool_events_completeness": "choice",
    **dict.fromkeys(
        ("duration_s", "tokens_spent", "input_tokens", "output_tokens", "tool_events_count"),
        "number",
    ),
    "head_after": "git_id",
    "commit_refs": "list",
    "artifact_refs": "list",
    "refs": "refs",
    "result_report": "choice",
    "result_report_problem": "choice",
    "network_egress": "egress",
}
TRANSACTION_KINDS = {
    **dict.fromkeys(TRANSACTION_IDENTIFIER_FIELDS, "identifier"),
    "acceptance": "choice",
    "accepted_commits": "list",
    "accepted_paths": "list",
}
RESULT_KINDS = {
    "ok": "bool",
    "path": "path",
    "head_after": "git_id",
    "target_repo": "target_repo",
    "committed": "bool",
    "execution_evidence": "evidence",
    "repository_transaction": "transaction",
}


def test_result_report_choices_are_kept_and_anything_else_dropped() -> None:
    from ops_evidence import RESULT_REPORT, RESULT_REPORT_PROBLEMS, normalize_execution_evidence

    for choice in RESULT_REPORT:
        assert normalize_execution_evidence({"result_report": choice}) == {"result_report": choice}
    for problem in RESULT_REPORT_PROBLEMS:
        kept = normalize_execution_evidence({"result_report_problem": problem})
        assert kept == {"result_report_problem": problem}
    for bad in ("ACCEPTED", "refused ", "x" * 10_000, 1, None, ["refused"]):
        assert normalize_execution_evidence({"result_report": bad}) is None
        assert normalize_execution_evidence({"result_report_problem": bad}) is None
    # the longest choice is what the worst-case arithmetic charges
    assert max(len(c) for c in RESULT_REPORT | RESULT_REPORT_PROBLEMS) + 2 == VALUE_BOUND["choice"]


def test_the_kind_tables_cover_the_allowlists_exactly() -> None:
    assert set(REFS_KINDS) == EXECUTION_REFS_KEYS
    assert set(EVIDENCE_KINDS) == EXECUTION_EVIDENCE_KEYS
    assert set(TRANSACTION_KINDS) == REPOSITORY_TRANSACTION_KEYS
    assert set(RESULT_KINDS) == RESULT_KEYS


def test_the_arithmetic_worst_case_is_under_the_outbox_bound() -> None:
    bounds = dict(VALUE_BOUND)
    bounds["refs"] = object_bound({k: bounds[v] for k, v in REFS_KINDS.items()})
    bounds["evidence"] = object_bound({k: bounds[v] for k, v in EVIDENCE_KINDS.items()})
    bounds["transaction"] = object_bound({k: bounds[v] for k, v in TRANSACTION_KINDS.items()})
    result_bound = object_bound({k: bounds[v] for k, v in RESULT_KINDS.items()})
    assert result_bound <= MAX_ENCODED_BYTES
    assert result_bound == 65_100  # the figure normalize.py's docstring gives


def test_a_maximal_result_normalizes_within_the_bounds() -> None:
    identifiers = [WORST_IDENTIFIER] * MAX_COLLECTION_ITEMS
    paths = [WORST_PATH] * MAX_COLLECTION_ITEMS
    commits = [WORST_GIT_ID] * MAX_COLLECTION_ITEMS
    evidence = {
        **{k: WORST_IDENTIFIER for k, kind in EVIDENCE_KINDS.items() if kind == "identifier"},
        "tool_events_completeness": "unavailable",
        "result_report": "refused",
        "result_report_problem": "not_a_regular_file",
        "duration_s": WORST_FLOAT,
        "tokens_spent": MAX_INT,
        "input_tokens": MAX_INT,
        "output_tokens": MAX_INT,
        "tool_events_count": MAX_INT,
        "head_after": WORST_GIT_ID,
        "commit_refs": commits,
        "artifact_refs": paths,
        "refs": {
            "correlation_id": WORST_IDENTIFIER,
            "causation_id": WORST_IDENTIFIER,
            "request_ref": WORST_IDENTIFIER,
            "goal_refs": identifiers,
            "initiative_refs": identifiers,
        },
        "network_egress": MAXIMAL_EGRESS,
    }
    transaction = {
        **{k: WORST_IDENTIFIER for k, kind in TRANSACTION_KINDS.items() if kind == "identifier"},
        "acceptance": "rejected",
        # acceptance lists are kept whole or not at all, so send the largest that fits
        "accepted_commits": bounded_list(commits, git_object_id),
        "accepted_paths": bounded_list(paths, repo_path),
    }
    raw = {
        "ok": False,
        "path": WORST_PATH,
        "head_after": WORST_GIT_ID,
        "target_repo": WORST_TARGET_REPO,
        "committed": False,
        "evidence": evidence,
        "repository_transaction": transaction,
        "tool_output": "x" * 10**6,
    }
    result = normalize_result(raw)
    assert find_bound_violations(result) == []
    assert set(result) == RESULT_KEYS
    assert set(result["execution_evidence"]) == EXECUTION_EVIDENCE_KEYS  # type: ignore[arg-type]
    assert encoded_size(result) > 50_000  # genuinely near the bound, not a trivial pass
    assert normalize_result(result) == result


def test_acceptance_lists_with_any_invalid_item_are_dropped_whole() -> None:
    from ops_evidence import normalize_repository_transaction

    tx = normalize_repository_transaction(
        {
            "transaction_id": "tx-1",
            "accepted_paths": ["briefs/ok.md", ".git/config"],
            "accepted_commits": ["a" * 40, "NOT-A-SHA"],
        }
    )
    assert tx == {"transaction_id": "tx-1"}
    valid = {
        "transaction_id": "tx-1",
        "accepted_paths": ["briefs/ok.md"],
        "accepted_commits": ["a" * 40],
    }
    assert normalize_repository_transaction(valid) == valid
    too_many = {"transaction_id": "tx-1", "accepted_paths": [f"p/{i}.md" for i in range(101)]}
    assert normalize_repository_transaction(too_many) == {"transaction_id": "tx-1"}
