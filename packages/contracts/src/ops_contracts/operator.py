"""HTTP bodies of activity-core's operator plane: requeue, cancel, explain, the runs
summary and dead-letter view, the workers view and the audit trail.

Requests are strict like the queue's (unknown fields, wrong types and out-of-range values
are a 422). Responses describe what the API answers and ignore unknown fields, so a
client built against this version keeps reading a newer server.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from ops_contracts.codes import LabelsMode, RefusalCode, RunState
from ops_contracts.queue import OpsRun

__all__ = [
    "IDEMPOTENCY_KEY_PATTERN",
    "MAX_BULK_REQUEUE",
    "MAX_CANCEL_REASON_LENGTH",
    "AuditEntry",
    "AuditOutcome",
    "AuditPage",
    "CancelRequest",
    "CompactEvidence",
    "DeadLetterPage",
    "DeadLetterRun",
    "ExplainReason",
    "ExplainResponse",
    "OldestOpenRun",
    "OperatorRole",
    "RequeueManyRequest",
    "RequeueManyResponse",
    "RequeueOutcome",
    "RunsSummary",
    "WorkerState",
    "WorkerView",
    "WorkersResponse",
    "cancel_reason_error",
]

# An Idempotency-Key header: what a client may choose as the identity of one requeue
# (a UUID, a ticket reference, "retry-2"). Bounded and free of whitespace and separators
# that would make the derived run key ambiguous in logs.
IDEMPOTENCY_KEY_PATTERN = r"^[A-Za-z0-9._:@+=-]{1,128}$"
MAX_BULK_REQUEUE = 100
MAX_CANCEL_REASON_LENGTH = 1000

_REQUEST_CONFIG = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

# What a stored error cannot show (ops_evidence.sanitize_error makes them spaces and strips
# the ends): controls (Cc), format characters (Cf: zero-width, joiners, bidi, the BOM),
# lone surrogates (Cs), line and paragraph separators (Zl, Zp), and spaces (Zs).
_NOT_SHOWN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Zs"})


def cancel_reason_error(value: str) -> str | None:
    """Why ``value`` is no cancel reason, or None. The rule of every door (the JSON body,
    the UI's form; the CLI sends the body): 1 to 1000 characters, and at least one of them
    visible, so something is left once the reason is sanitized for storing (a reason of
    NUL, zero-width or word-joiner characters, or spaces, would be stored as nothing)."""
    if not value or len(value) > MAX_CANCEL_REASON_LENGTH:
        return f"must be 1 to {MAX_CANCEL_REASON_LENGTH} characters"
    if all(c.isspace() or unicodedata.category(c) in _NOT_SHOWN for c in value):
        return "must show something: not only spaces, control or invisible characters"
    return None


class OperatorRole(StrEnum):
    """`operator` reads and acts; `viewer` reads everything and acts on nothing (403)."""

    operator = "operator"
    viewer = "viewer"


class WorkerState(StrEnum):
    """How a worker identity looks from the queue (thresholds in the workers view's
    documentation): `alive` claimed recently or holds a run under a live lease, `idle`
    stopped claiming a short while ago, `gone` not seen for long and holding nothing live."""

    alive = "alive"
    idle = "idle"
    gone = "gone"


class AuditOutcome(StrEnum):
    """`applied`: the action changed something; `repeated`: an idempotent repeat answered
    with what an earlier request did; `refused`: nothing changed, `code` says why."""

    applied = "applied"
    repeated = "repeated"
    refused = "refused"


# -- actions ----------------------------------------------------------------------------


class CancelRequest(BaseModel):
    """``POST /ops-runs/{id}/cancel``: why the operator stops the run (kept, sanitized and
    bounded, in the run's ``last_error``)."""

    model_config = _REQUEST_CONFIG

    reason: str = Field(min_length=1, max_length=MAX_CANCEL_REASON_LENGTH)

    @field_validator("reason")
    @classmethod
    def _shows_something(cls, value: str) -> str:
        error = cancel_reason_error(value)
        if error is not None:
            raise ValueError(error)
        return value


class RequeueManyRequest(BaseModel):
    """``POST /ops-runs/requeue``: up to 100 distinct run ids, each requeued on its own."""

    model_config = _REQUEST_CONFIG

    run_ids: list[Annotated[UUID, Field(strict=False)]] = Field(
        min_length=1, max_length=MAX_BULK_REQUEUE
    )

    @field_validator("run_ids")
    @classmethod
    def _distinct(cls, value: list[UUID]) -> list[UUID]:
        if len(set(value)) != len(value):
            raise ValueError("run ids must be distinct")
        return value


class RequeueOutcome(BaseModel):
    """One run of a bulk requeue: `status` is what the single-run endpoint would have
    answered (201 a new successor, 200 the one this key made before, else the refusal's
    status with its `code` and `detail`)."""

    run_id: UUID
    status: int
    successor: OpsRun | None = None
    code: RefusalCode | None = None
    detail: str | None = None


class RequeueManyResponse(BaseModel):
    results: list[RequeueOutcome]


# -- explain ----------------------------------------------------------------------------


class ExplainReason(BaseModel):
    code: str = Field(description="a stable machine code (see the explain endpoint's codes)")
    detail: str


class ExplainResponse(BaseModel):
    """``GET /ops-runs/{id}/explain``: why the run is where it is, most telling first."""

    run_id: UUID
    state: RunState
    reasons: list[ExplainReason]


# -- views ------------------------------------------------------------------------------


class OldestOpenRun(BaseModel):
    id: UUID
    created_at: datetime
    age_seconds: float


class RunsSummary(BaseModel):
    """``GET /ops/runs/summary``: the live queue in full, terminal runs of a window."""

    as_of: datetime
    open: int
    claimed: int
    stalled: int = Field(description="claimed runs whose lease has ended (not yet reopened)")
    oldest_open: OldestOpenRun | None
    terminal_since: datetime = Field(
        description="terminal counts are of runs created at or after this time"
    )
    succeeded: int
    failed: int
    expired: int


class CompactEvidence(BaseModel):
    """The compact execution evidence operators see: profile, rein, model, sandbox,
    outcome (``ops_evidence.compact_execution_evidence``)."""

    profile_ref: str | None = None
    rein_id: str | None = None
    rein_version: str | None = None
    resolved_model: str | None = None
    sandbox_profile: str | None = None
    outcome: str | None = None


class DeadLetterRun(BaseModel):
    """A failed or expired run as the dead-letter view shows it."""

    id: UUID
    activity_definition_id: UUID
    automation: str | None = Field(description="the automation's slug")
    title: str
    target_repo: str
    labels: list[str]
    priority: str
    state: RunState
    attempt: int
    claim_owner: str | None = Field(description="the last lease holder, where kept")
    last_error: str | None
    cancelled_by: str | None = None
    execution_evidence: CompactEvidence
    requeued_from: UUID | None = None
    requeued_as: list[UUID] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime


class DeadLetterPage(BaseModel):
    runs: list[DeadLetterRun]
    next_cursor: str | None


WorkerLabel = Annotated[str, StringConstraints(min_length=1)]


class WorkerView(BaseModel):
    worker_id: str
    last_claim_at: datetime | None = Field(
        description="the last claim request this worker made (absent: none recorded)"
    )
    labels: list[WorkerLabel] | None = Field(
        description="the label filter of that claim; absent: it claimed any run"
    )
    labels_mode: LabelsMode | None
    limit: int | None
    holding: list[UUID] = Field(description="the runs it holds claimed now, by lease end")
    state: WorkerState


class WorkersResponse(BaseModel):
    workers: list[WorkerView]


class AuditEntry(BaseModel):
    """One operator action or refusal, as recorded."""

    id: int
    at: datetime
    actor: str = Field(description="the operator's name (`operator` for the single token)")
    role: str
    action: str = Field(description="e.g. requeue, cancel, expire-leases, fire")
    target: str = Field(description="e.g. ops_run:<uuid>, automation:<slug>, queue")
    request_id: str
    outcome: AuditOutcome
    code: str | None = Field(description="the refusal code of a refused action")
    detail: str | None
    details: dict[str, Any] = Field(description="what the action did: successor, reason, counts")


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    next_cursor: str | None
