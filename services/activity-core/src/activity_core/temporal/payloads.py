"""What crosses Temporal: the workflow's input and result and the activities' arguments.

Plain dataclasses of JSON-friendly values (the SDK's default converter), no behaviour, so the
workflow sandbox can import them and old histories stay decodable: add fields with
defaults, never rename or remove one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "MANUAL_TRIGGER_PREFIX",
    "SCHEDULED_TRIGGER",
    "WORKFLOW_NAME",
    "EmitInput",
    "EmitOutcome",
    "FirePolicy",
    "MarkFailedInput",
    "PublishInput",
    "RecordRunInput",
    "RecordedRun",
    "RunActivityInput",
    "RunActivityResult",
    "SinkGiveUpInput",
    "SinkOutcome",
]

# The workflow type, by name: the API process and the schedules start it without importing
# the worker's code. Started without an execution timeout: a fire waits for a worker, a
# database or a sink that is away, however long, and ends emitted or failed, never timed
# out (see workflow.py).
WORKFLOW_NAME = "RunActivityWorkflow"

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
    # `activity-core retry-fire`: the fire repeated, with its triggering event and its
    # scheduled time, so the retry has the same idempotency keys and context
    retry_of: str | None = None
    triggering_event_id: str | None = None
    scheduled_for: datetime | None = None


@dataclass(frozen=True)
class RunActivityResult:
    activity_run_id: str
    triggering_event_id: str
    emitted_count: int
    # the fire's IssueSink writes after its sink step: accepted, and failed for good
    sink_written: int = 0
    sink_failed: int = 0


@dataclass(frozen=True)
class FirePolicy:
    """How long a fire's steps wait between attempts, and how long the sink is retried.
    The worker's settings, read once per fire (a local activity), so the history records
    what the fire ran with and a replay uses the same."""

    db_retry_max_seconds: float
    sink_retry_max_seconds: float
    sink_retry_window_seconds: float


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
    retry_of: str | None = None


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
    sink_writes_left: int = 0


@dataclass(frozen=True)
class PublishInput:
    activity_run_id: str


@dataclass(frozen=True)
class SinkOutcome:
    written: int
    failed: int


@dataclass(frozen=True)
class SinkGiveUpInput:
    activity_run_id: str
    reason: str


@dataclass(frozen=True)
class MarkFailedInput:
    activity_run_id: str
    reason: str
