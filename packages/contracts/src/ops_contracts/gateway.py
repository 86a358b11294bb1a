"""Glas ``GatewayResult`` 1.0, as a producer (the worker) writes it.

A Glas-backed executor submits its whole ``GatewayResult`` as the ``result`` of
a complete/fail call; activity-core keeps only the allowlisted evidence
envelope (``ops_evidence`` does that, tolerantly, for any producer). These
models are the strict producer side: unknown fields, wrong scalar types and
non-finite numbers are refused here, so the worker cannot send what the queue
would have to drop. ``tool_output`` and ``tool_error`` exist for direct Glas
callers; consumers drop them and they are never persisted.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ops_contracts.egress import NetworkEgress

__all__ = [
    "GATEWAY_CONTRACT_VERSION",
    "AttributionRefs",
    "GatewayEvidence",
    "GatewayOutcome",
    "GatewayResult",
    "RepositoryTransaction",
    "ResultReport",
    "ResultReportProblem",
    "ToolEventsCompleteness",
    "gateway_result_payload",
]

GATEWAY_CONTRACT_VERSION: Literal["1.0"] = "1.0"

GatewayOutcome = Literal["succeeded", "failed", "refused", "timed_out", "cancelled"]
ToolEventsCompleteness = Literal["complete", "partial", "unavailable"]
# What became of an approach's own report (its result file); ops_evidence.RESULT_REPORT*.
ResultReport = Literal["accepted", "partial", "refused"]
ResultReportProblem = Literal[
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
]

_PRODUCER_CONFIG = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class AttributionRefs(BaseModel):
    """The organizational refs a result may carry: exactly ``ATTRIBUTION_REF_KEYS``."""

    model_config = _PRODUCER_CONFIG

    correlation_id: str | None = None
    causation_id: str | None = None
    goal_refs: list[str] | None = None
    initiative_refs: list[str] | None = None
    request_ref: str | None = None


class GatewayEvidence(BaseModel):
    """The execution constellation and measurements of one Glas request.

    Zero is a measurement and stays zero; ``None`` means not measured and is
    omitted. Event visibility a rein cannot report is ``unavailable``, never a
    guessed ``complete``.
    """

    model_config = _PRODUCER_CONFIG

    contract_version: Literal["1.0"]
    request_id: str
    profile_ref: str
    rein_id: str
    rein_version: str
    resolved_model: str | None = None
    sandbox_profile: str | None = None
    outcome: GatewayOutcome
    duration_s: float | None = Field(default=None, ge=0)
    tokens_spent: int | None = Field(default=None, ge=0, le=2**53 - 1)
    input_tokens: int | None = Field(default=None, ge=0, le=2**53 - 1)
    output_tokens: int | None = Field(default=None, ge=0, le=2**53 - 1)
    tool_events_count: int | None = Field(default=None, ge=0)
    tool_events_completeness: ToolEventsCompleteness = "unavailable"
    head_after: str | None = None
    commit_refs: list[str] | None = None
    artifact_refs: list[str] | None = None
    refs: AttributionRefs | None = None
    result_report: ResultReport | None = None
    result_report_problem: ResultReportProblem | None = None
    network_egress: NetworkEgress | None = None


class RepositoryTransaction(BaseModel):
    """Evidence of the repository work done under a grant.

    ``grant_id`` and ``acceptance_policy_id`` are computed with
    ``ops_contracts.grant``; activity-core recomputes them from the queued
    grant and refuses a completion whose evidence does not match.
    """

    model_config = _PRODUCER_CONFIG

    transaction_id: str
    correlation_id: str | None = None
    baseline_digest: str | None = None
    # ``sha256:<hex>`` of the changes bundle uploaded before the close (docs/changes.md)
    changes_digest: str | None = None
    grant_id: str | None = None
    acceptance_policy_id: str | None = None
    acceptance: Literal["accepted", "rejected"]
    accepted_commits: list[str]
    accepted_paths: list[str]
    external_metrics_id: str | None = None


class GatewayResult(BaseModel):
    """What a Glas-backed executor submits as a complete/fail ``result``."""

    model_config = _PRODUCER_CONFIG

    ok: bool
    evidence: GatewayEvidence
    repository_transaction: RepositoryTransaction | None = None
    # Executor fields the run-artefact links are built from.
    path: str | None = None
    head_after: str | None = None
    target_repo: str | None = None
    committed: bool | None = None
    # Direct-caller output: allowed from the producer, dropped by every consumer.
    tool_output: str | None = None
    tool_error: str | None = None


def gateway_result_payload(result: GatewayResult) -> dict[str, object]:
    """The JSON object to send as ``result``: absent values omitted, not ``null``."""
    return result.model_dump(mode="json", exclude_none=True)
