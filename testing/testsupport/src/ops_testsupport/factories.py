"""Factories the tests and the bench build their inputs from: a Glas GatewayResult 1.0 (the
spec's example), an ops run as the queue answers it, and the largest raw worker result the
evidence allowlist keeps."""

from __future__ import annotations

from typing import Any

from ops_contracts import OpsRun
from ops_evidence import MAX_COLLECTION_ITEMS, MAX_IDENTIFIER_CHARS, MAX_INT, MAX_PATH_CHARS
from ops_evidence.fields import bounded_list, git_object_id, repo_path

__all__ = [
    "EVIDENCE_IDENTIFIER_FIELDS",
    "RUN_ID",
    "TRANSACTION_IDENTIFIER_FIELDS",
    "WORKER",
    "gateway_result",
    "glas_evidence",
    "maximal_raw_result",
    "ops_run",
    "run_projection",
]

WORKER = "rein-aharness@railiance01"
RUN_ID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
# The evidence fields the allowlist keeps as identifiers, as the tests state them (on
# purpose not read from ops_evidence: a test of the allowlist must not restate it from itself).
EVIDENCE_IDENTIFIER_FIELDS = (
    "request_id",
    "contract_version",
    "profile_ref",
    "rein_id",
    "rein_version",
    "resolved_model",
    "sandbox_profile",
    "outcome",
)
# The repository transaction's fields the allowlist keeps as identifiers, likewise.
TRANSACTION_IDENTIFIER_FIELDS = (
    "transaction_id",
    "correlation_id",
    "baseline_digest",
    "changes_digest",
    "grant_id",
    "acceptance_policy_id",
    "external_metrics_id",
)


def glas_evidence(**overrides: Any) -> dict[str, Any]:
    """The evidence of the spec's GatewayResult 1.0 example (every field the allowlist
    keeps, zero and `unavailable` included), with `overrides` on top."""
    return {
        "request_id": "req-1",
        "contract_version": "1.0",
        "profile_ref": "harness.agent-dev@1.0.0",
        "rein_id": "rein-aharness",
        "rein_version": "0.1.0",
        "resolved_model": "claude-sonnet-4-6",
        "sandbox_profile": "profile.bwrap-local",
        "outcome": "succeeded",
        "duration_s": 12.4,
        "tokens_spent": 321,
        "tool_events_count": 0,
        "tool_events_completeness": "unavailable",
        **overrides,
    }


def gateway_result(**overrides: Any) -> dict[str, Any]:
    """The spec's GatewayResult 1.0 example as a worker sends it (`tool_output` included,
    which is never stored), with `overrides` on top."""
    return {
        "ok": True,
        "evidence": glas_evidence(),
        "tool_output": "dropped before persistence",
        **overrides,
    }


def run_projection(run_id: str = RUN_ID, **overrides: Any) -> dict[str, Any]:
    """An Activity Core run projection as the queue answers it."""
    run: dict[str, Any] = {
        "id": run_id,
        "activity_definition_id": "0b7f3c1e-5d2a-4c8e-9f10-2a3b4c5d6e7f",
        "idempotency_key": "fi-daily-brief:daily-brief:scheduled:2026-01-01",
        "target_repo": "research/briefs",
        "title": "Research brief",
        "description": "",
        "labels": ["automated"],
        "priority": "medium",
        "state": "claimed",
        "claim_owner": WORKER,
        "lease_until": "2026-01-01T12:15:00Z",
        "attempt": 1,
        "source_type": "rule",
        "source_id": "daily-brief",
        "triggering_event_id": "scheduled:2026-01-01",
        "approach_hint": None,
        "harness_profile_ref": "harness.agent-dev@1.0.0",
        "execution_refs": {},
        "repository_grant": None,
        "result": None,
        "last_error": None,
        "created_at": "2026-01-01T06:00:00Z",
        "updated_at": "2026-01-01T06:00:00Z",
    }
    run.update(overrides)
    return run


def ops_run(**overrides: Any) -> OpsRun:
    """run_projection as the contract's model (a brief run unless overridden)."""
    fields: dict[str, Any] = {"harness_profile_ref": "harness.brief@1.0.0", **overrides}
    return OpsRun.model_validate(run_projection(**fields))


def maximal_raw_result() -> dict[str, Any]:
    """A raw result whose normalization is as large as the allowlist permits (~63 KB)."""
    identifier = '"' * MAX_IDENTIFIER_CHARS
    path = "\U0001f600" * MAX_PATH_CHARS
    git_id = "f" * 64
    identifiers = [identifier] * MAX_COLLECTION_ITEMS
    paths = [path] * MAX_COLLECTION_ITEMS
    evidence: dict[str, Any] = {key: identifier for key in EVIDENCE_IDENTIFIER_FIELDS}
    evidence.update(
        {
            "tool_events_completeness": "unavailable",
            "result_report": "refused",
            "result_report_problem": "not_a_regular_file",
            "duration_s": 2.2250738585072014e-308,
            "tokens_spent": MAX_INT,
            "input_tokens": MAX_INT,
            "output_tokens": MAX_INT,
            "tool_events_count": MAX_INT,
            "head_after": git_id,
            "commit_refs": [git_id] * MAX_COLLECTION_ITEMS,
            "artifact_refs": paths,
            "refs": {
                "correlation_id": identifier,
                "causation_id": identifier,
                "request_ref": identifier,
                "goal_refs": identifiers,
                "initiative_refs": identifiers,
            },
        }
    )
    transaction: dict[str, Any] = {
        key: identifier
        for key in (
            "transaction_id",
            "correlation_id",
            "baseline_digest",
            "grant_id",
            "acceptance_policy_id",
            "external_metrics_id",
        )
    }
    transaction.update(
        {
            "acceptance": "rejected",
            # acceptance lists are kept whole or not at all: send the largest that fits
            "accepted_commits": bounded_list([git_id] * MAX_COLLECTION_ITEMS, git_object_id),
            "accepted_paths": bounded_list(paths, repo_path),
        }
    )
    return {
        "ok": False,
        "path": path,
        "repository_transaction": transaction,
        "head_after": git_id,
        "target_repo": "r" * 256,
        "committed": False,
        "evidence": evidence,
        "tool_output": "x" * 1_000_000,
        "prompt": "never stored",
    }
