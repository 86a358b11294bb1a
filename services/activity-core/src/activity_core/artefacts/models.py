"""What the run-artefact views return: the JSON response models and the UI's input.

Deliberately narrow. From an ops run's `result` only the delivered artefacts (path,
commit, repository) and the compact execution evidence (profile, rein, model, sandbox,
outcome) appear; from the definition only its title and schedule; from a fire no request
context. Nothing here can carry a prompt, a description, tool output or model text.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ops_contracts import RunState

__all__ = [
    "Artifact",
    "AutomationIndex",
    "AutomationRef",
    "AutomationSummary",
    "CompactEvidence",
    "Fire",
    "FireDetail",
    "FireOpsRun",
    "FirePage",
    "LastFire",
    "Schedule",
    "SinkWrites",
]

# How an ops run was attributed to a fire (see artefacts/queries.py, FIRE_OPS_RUNS).
MatchedBy = Literal["run_id", "triggering_event", "contains", "time_window"]

# A reader's summary of an ops run's state, `stalled` being a claim whose lease has run
# out but that no claim or expire-leases call has reopened yet.
Disposition = Literal["queued", "running", "stalled", "succeeded", "failed", "expired"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Schedule(_Model):
    cron: str
    timezone: str | None = None


class AutomationRef(_Model):
    id: uuid.UUID
    slug: str
    title: str
    schedule: Schedule | None = Field(description="absent: fired manually only")
    paused: bool


# A fire's status: `started` (recorded, emitting: waiting for a worker, a database or a
# retry), `emitted` (its ops runs are queued), `failed` (it will not emit; `error` says why).
FireStatus = Literal["started", "emitted", "failed"]

_FIRE_ERROR = (
    "why the fire failed (status failed), or what its emission is retrying on (status "
    "started); absent otherwise"
)


class LastFire(_Model):
    id: uuid.UUID
    run_id: str
    status: FireStatus
    started_at: datetime
    finished_at: datetime | None = None
    scheduled_for: datetime | None = None
    error: str | None = Field(default=None, description=_FIRE_ERROR)


class AutomationSummary(AutomationRef):
    last_fire: LastFire | None
    queue_counts: dict[RunState, int] = Field(
        description="ops runs of this automation by state; every state is present"
    )


class AutomationIndex(_Model):
    automations: list[AutomationSummary]


class CompactEvidence(_Model):
    profile_ref: str | None = None
    rein_id: str | None = None
    rein_version: str | None = None
    resolved_model: str | None = None
    sandbox_profile: str | None = None
    outcome: str | None = None


class Artifact(_Model):
    ops_run_id: uuid.UUID
    path: str
    head_after: str | None = None
    target_repo: str | None = None
    forgejo_url: str | None = Field(
        description="FORGEJO_WEB_BASE/{org}/{repo}/src/commit/{commit}/{path} at the "
        "commit an operator published (POST /ops-runs/{id}/publish); absent until the run "
        "is published (the commit exists only on the worker until then), or when a part "
        "is missing or invalid"
    )
    change_url: str | None = Field(
        default=None,
        description="before publication: the run's own change view of this file "
        "(/ops/ui/runs/{ops_run_id}#change-...), when its changes are stored",
    )


class FireOpsRun(_Model):
    id: uuid.UUID
    title: str
    target_repo: str
    state: RunState
    disposition: Disposition
    attempt: int
    claim_owner: str | None = Field(description="the lease holder (or last holder)")
    lease_until: datetime | None
    priority: str
    labels: list[str]
    last_error: str | None
    harness_profile_ref: str | None
    triggering_event_id: str
    matched_by: MatchedBy
    created_at: datetime
    updated_at: datetime
    execution_evidence: CompactEvidence
    artifacts: list[Artifact]


class SinkWrites(_Model):
    """The IssueSink writes of a fire's tasks (State Hub by default), by their state. A
    write is done after the fire's ops runs are queued and retried on its own; `failed`
    ones (refused, or the sink stayed down for the whole retry window) are sent again by
    `activity-core retry-fire`."""

    written: int
    pending: int
    failed: int
    error: str | None = Field(
        description="the last error of a write that is pending or failed; absent when none is"
    )


class Fire(_Model):
    """One activity run (a scheduled or manual fire) and the ops runs it produced."""

    id: uuid.UUID
    run_id: str
    workflow_id: str
    trigger_key: str
    triggering_event_id: str
    scheduled_for: datetime | None
    status: FireStatus
    error: str | None = Field(description=_FIRE_ERROR)
    retry_of: str | None = Field(
        description="the run id of the fire this one retries (activity-core retry-fire)"
    )
    emitted_count: int
    sink_writes: SinkWrites
    started_at: datetime
    finished_at: datetime | None
    ops_runs: list[FireOpsRun]
    ops_runs_truncated: bool = Field(
        description="more ops runs matched than one fire shows (see MAX_OPS_RUNS_PER_FIRE)"
    )
    artifacts: list[Artifact] = Field(description="every artefact of this fire's ops runs")

    @property
    def open(self) -> bool:
        """Work of this fire is still queued or running."""
        return any(run.state in (RunState.open, RunState.claimed) for run in self.ops_runs)


class FirePage(_Model):
    automation: AutomationRef
    runs: list[Fire]
    next_cursor: str | None


class FireDetail(_Model):
    automation: AutomationRef
    run: Fire
