"""Build GatewayResult 1.0 pieces for a queued request (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import ValidationError

from ops_contracts import (
    ATTRIBUTION_REF_KEYS,
    AttributionRefs,
    GatewayEvidence,
    GatewayResult,
    NetworkEgress,
    RepositoryTransaction,
    acceptance_policy_id,
    grant_id,
)
from ops_contracts.gateway import GatewayOutcome
from rein_aharness.gateway.request import QueuedRequest

__all__ = ["attribution_refs", "gateway_evidence", "gateway_result", "repository_transaction"]


def attribution_refs(request: QueuedRequest) -> AttributionRefs | None:
    """The run's allowlisted execution refs, if they are well-typed; else none at all."""
    refs = {
        key: value
        for key, value in request.run.execution_refs.items()
        if key in ATTRIBUTION_REF_KEYS and value is not None
    }
    if not refs:
        return None
    try:
        return AttributionRefs.model_validate(refs)
    except ValidationError:
        return None


def gateway_evidence(
    request: QueuedRequest,
    *,
    outcome: GatewayOutcome,
    duration_s: float,
    head_after: str | None = None,
    commits: Sequence[str] = (),
    paths: Sequence[str] = (),
    network_egress: NetworkEgress | None = None,
) -> GatewayEvidence:
    profile = request.profile
    return GatewayEvidence(
        contract_version="1.0",
        request_id=request.request_id,
        profile_ref=profile.ref,
        rein_id=profile.rein.id,
        rein_version=profile.rein.version,
        resolved_model=profile.resolved_model,
        # The sandbox that ran (gateway_evidence is built only once the approach ran in it).
        sandbox_profile=request.sandbox.evidence_name,
        outcome=outcome,
        duration_s=round(max(duration_s, 0.0), 3),
        tool_events_completeness="unavailable",
        head_after=head_after,
        commit_refs=list(commits) or None,
        artifact_refs=list(paths) or None,
        refs=attribution_refs(request),
        network_egress=network_egress,
    )


def repository_transaction(
    request: QueuedRequest,
    *,
    baseline: str | None,
    acceptance: Literal["accepted", "rejected"],
    commits: Sequence[str] = (),
    paths: Sequence[str] = (),
    changes_digest: str | None = None,
) -> RepositoryTransaction:
    grant = request.grant
    refs = attribution_refs(request)
    return RepositoryTransaction(
        transaction_id=request.transaction_id,
        correlation_id=refs.correlation_id if refs is not None else None,
        baseline_digest=baseline,
        changes_digest=changes_digest if acceptance == "accepted" else None,
        grant_id=grant_id(grant) if grant is not None else None,
        acceptance_policy_id=acceptance_policy_id(grant) if grant is not None else None,
        acceptance=acceptance,
        accepted_commits=list(commits) if acceptance == "accepted" else [],
        accepted_paths=list(paths) if acceptance == "accepted" else [],
    )


def gateway_result(
    request: QueuedRequest,
    *,
    ok: bool,
    evidence: GatewayEvidence,
    transaction: RepositoryTransaction | None,
    path: str | None = None,
    head_after: str | None = None,
    committed: bool | None = None,
) -> GatewayResult:
    return GatewayResult(
        ok=ok,
        evidence=evidence,
        repository_transaction=transaction,
        path=path,
        head_after=head_after,
        target_repo=request.run.target_repo,
        committed=committed,
    )
