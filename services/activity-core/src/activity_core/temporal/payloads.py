"""What crosses Temporal: the workflow's input and result and the activities' arguments.

Plain dataclasses of JSON-friendly values (the SDK's default converter), no behaviour, so the
workflow sandbox can import them and old histories stay decodable: add fields with
defaults, never rename or remove one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# The workflow type, by name: the API process and the schedules start it without importing
# the worker's code.
WORKFLOW_NAME = "RunActivityWorkflow"
# a fire still running after this is stuck, not working: end it rather than let fires pile up
EXECUTION_TIMEOUT = timedelta(hours=1)

# The trigger key every schedule action carries; the workflow turns it into a per-fire
# triggering event id (never the bare sentinel).
SCHEDULED_TRIGGER = "scheduled"
MANUAL_TRIGGER_PREFIX = "manual:"


@dataclass(frozen=True)
class RunActivityInput:
    activity_slug: str
    trigger_key: str
    # a manual fire's request context (correlation_id, goal_ref, ...); None for schedules
    request: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunActivityResult:
    activity_run_id: str
    triggering_event_id: str
    emitted_count: int


@dataclass(frozen=True)
class RecordRunInput:
    activity_slug: str
    workflow_id: str
    run_id: str
    trigger_key: str
    triggering_event_id: str
    scheduled_for: datetime | None
    fired_at: datetime
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedRun:
    activity_run_id: str
    triggering_event_id: str


@dataclass(frozen=True)
class EmitInput:
    activity_run_id: str


@dataclass(frozen=True)
class EmitOutcome:
    emitted_count: int


@dataclass(frozen=True)
class MarkFailedInput:
    activity_run_id: str
    reason: str
