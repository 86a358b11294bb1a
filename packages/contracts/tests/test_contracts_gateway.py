"""Glas GatewayResult 1.0, producer side: strict, finite, closed."""

from typing import Any

import pytest
from pydantic import ValidationError

from ops_contracts import (
    ATTRIBUTION_REF_KEYS,
    AttributionRefs,
    GatewayEvidence,
    GatewayResult,
    RepositoryTransaction,
    gateway_result_payload,
)
from ops_testsupport.factories import gateway_result, glas_evidence

SPEC_EXAMPLE: dict[str, Any] = gateway_result()


def evidence(**overrides: Any) -> dict[str, Any]:
    return glas_evidence(**overrides)


def test_spec_example_round_trips_without_nulls() -> None:
    result = GatewayResult.model_validate(SPEC_EXAMPLE)
    assert gateway_result_payload(result) == SPEC_EXAMPLE


def test_zero_stays_zero_and_absent_stays_absent() -> None:
    minimal = GatewayEvidence(
        contract_version="1.0",
        request_id="r",
        profile_ref="harness.x@1.0.0",
        rein_id="rein",
        rein_version="1",
        outcome="failed",
        tokens_spent=0,
    )
    payload = gateway_result_payload(GatewayResult(ok=False, evidence=minimal))
    assert payload["evidence"] == {
        "contract_version": "1.0",
        "request_id": "r",
        "profile_ref": "harness.x@1.0.0",
        "rein_id": "rein",
        "rein_version": "1",
        "outcome": "failed",
        "tokens_spent": 0,
        "tool_events_completeness": "unavailable",
    }


def test_full_result_with_transaction_and_refs() -> None:
    body = {
        **SPEC_EXAMPLE,
        "path": "briefs/2025-01-01.md",
        "head_after": "abc123",
        "target_repo": "research/briefs",
        "committed": True,
        "evidence": evidence(
            commit_refs=["abc123"],
            artifact_refs=["briefs/2025-01-01.md"],
            refs={"correlation_id": "c-1", "goal_refs": ["g-1"]},
            head_after="abc123",
        ),
        "repository_transaction": {
            "transaction_id": "tx-1",
            "correlation_id": "c-1",
            "baseline_digest": "sha256:00",
            "changes_digest": "sha256:" + "ab" * 32,
            "grant_id": "rg1-x",
            "acceptance_policy_id": "ap1-x",
            "acceptance": "accepted",
            "accepted_commits": ["abc123"],
            "accepted_paths": ["briefs/2025-01-01.md"],
            "external_metrics_id": "m-1",
        },
    }
    result = GatewayResult.model_validate_json(GatewayResult.model_validate(body).model_dump_json())
    assert gateway_result_payload(result) == body


def test_attribution_refs_are_exactly_the_allowlist() -> None:
    assert set(AttributionRefs.model_fields) == set(ATTRIBUTION_REF_KEYS)


@pytest.mark.parametrize(
    "body",
    [
        {**SPEC_EXAMPLE, "prompt": "secret"},
        {**SPEC_EXAMPLE, "ok": "true"},
        {**SPEC_EXAMPLE, "ok": 1},
        {**SPEC_EXAMPLE, "evidence": evidence(provider_response="…")},
        {**SPEC_EXAMPLE, "evidence": evidence(contract_version="1.1")},
        {**SPEC_EXAMPLE, "evidence": evidence(contract_version=1.0)},
        {**SPEC_EXAMPLE, "evidence": evidence(outcome="ok")},
        {**SPEC_EXAMPLE, "evidence": evidence(tokens_spent="321")},
        {**SPEC_EXAMPLE, "evidence": evidence(tokens_spent=True)},
        {**SPEC_EXAMPLE, "evidence": evidence(tokens_spent=-1)},
        {**SPEC_EXAMPLE, "evidence": evidence(tool_events_count=1.5)},
        {**SPEC_EXAMPLE, "evidence": evidence(duration_s=-0.1)},
        {**SPEC_EXAMPLE, "evidence": evidence(duration_s="12")},
        {**SPEC_EXAMPLE, "evidence": evidence(duration_s=float("nan"))},
        {**SPEC_EXAMPLE, "evidence": evidence(duration_s=float("inf"))},
        {**SPEC_EXAMPLE, "evidence": evidence(tool_events_completeness="full")},
        {**SPEC_EXAMPLE, "evidence": evidence(refs={"api_key": "x"})},
        {**SPEC_EXAMPLE, "evidence": {"contract_version": "1.0"}},
        {
            **SPEC_EXAMPLE,
            "repository_transaction": {
                "transaction_id": "t",
                "acceptance": "maybe",
                "accepted_commits": [],
                "accepted_paths": [],
            },
        },
        {
            **SPEC_EXAMPLE,
            "repository_transaction": {
                "transaction_id": "t",
                "acceptance": "rejected",
                "accepted_commits": [],
                "accepted_paths": [],
                "raw_patterns": ["docs/"],
            },
        },
    ],
)
def test_producer_models_refuse_what_consumers_would_drop(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        GatewayResult.model_validate(body)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_duration_from_json_is_refused(number: str) -> None:
    text = (
        '{"ok": true, "evidence": {"contract_version": "1.0", "request_id": "r",'
        ' "profile_ref": "p@1.0.0", "rein_id": "r", "rein_version": "1",'
        f' "outcome": "succeeded", "duration_s": {number}}}}}'
    )
    with pytest.raises(ValidationError):
        GatewayResult.model_validate_json(text)


def test_integral_duration_is_a_float() -> None:
    parsed = GatewayEvidence.model_validate_json(
        '{"contract_version": "1.0", "request_id": "r", "profile_ref": "p@1.0.0",'
        ' "rein_id": "r", "rein_version": "1", "outcome": "timed_out", "duration_s": 12}'
    )
    assert parsed.duration_s == 12.0


def test_rejected_transaction_needs_no_evidence_ids() -> None:
    transaction = RepositoryTransaction(
        transaction_id="t", acceptance="rejected", accepted_commits=[], accepted_paths=[]
    )
    assert transaction.model_dump(mode="json", exclude_none=True) == {
        "transaction_id": "t",
        "acceptance": "rejected",
        "accepted_commits": [],
        "accepted_paths": [],
    }


def test_the_report_and_completeness_choices_match_the_consumer_allowlist() -> None:
    """The two packages may not import each other, so each states these choices; this
    holds the producer's Literals to the consumer's allowlist."""
    from typing import get_args

    from ops_contracts.gateway import ResultReport, ResultReportProblem, ToolEventsCompleteness
    from ops_evidence import RESULT_REPORT, RESULT_REPORT_PROBLEMS, TOOL_EVENTS_COMPLETENESS

    assert set(get_args(ResultReport)) == RESULT_REPORT
    assert set(get_args(ResultReportProblem)) == RESULT_REPORT_PROBLEMS
    assert set(get_args(ToolEventsCompleteness)) == TOOL_EVENTS_COMPLETENESS


def test_network_egress_is_strict_and_matches_the_consumer_allowlist() -> None:
    from typing import get_args

    from ops_contracts.egress import EgressOutcome, EgressReason, NetworkEgress
    from ops_evidence import EGRESS_OUTCOMES, EGRESS_REASONS, network_egress

    assert set(get_args(EgressOutcome)) == EGRESS_OUTCOMES
    assert set(get_args(EgressReason)) == EGRESS_REASONS
    body = {
        "mode": "allowlist",
        "allowed": 1,
        "refused": 1,
        "failed": 0,
        "bytes_up": 5,
        "bytes_down": 7,
        "destinations": [
            {
                "host": "127.0.0.1",
                "port": 8080,
                "outcome": "allowed",
                "connections": 1,
                "bytes_up": 5,
                "bytes_down": 7,
            },
            {
                "host": "localhost",
                "port": 8080,
                "outcome": "refused",
                "reason": "forbidden_address",
                "connections": 1,
                "bytes_up": 0,
                "bytes_down": 0,
            },
        ],
    }
    produced = NetworkEgress.model_validate(body).model_dump(exclude_none=True)
    assert produced == body
    assert network_egress(produced) == body  # the queue keeps all of it
    for bad in (
        {"mode": "closed"},
        {"mode": "open", "allowed": -1},
        {"mode": "open", "extra": 1},
        {"mode": "allowlist", "destinations": [{"outcome": "allowed", "host": "A B"}]},
    ):
        with pytest.raises(ValidationError):
            NetworkEgress.model_validate(bad)
