"""Temporal is the schedule truth: one Temporal Schedule per scheduled definition.

`TemporalScheduleApplier.apply(specs, removed=...)` makes Temporal match the definitions:

- schedule id `activity:{slug}`; cron and timezone from the definition; the action starts
  `RunActivityWorkflow(slug, trigger_key="scheduled")` on TEMPORAL_TASK_QUEUE. Temporal
  suffixes each started workflow id with the fire time and sets `TemporalScheduledStartTime`,
  from which the workflow derives the per-fire triggering event id.
- created when missing, updated when its digest (cron, timezone, action, policy) changed,
  left alone otherwise;
- paused, with a note saying why, when the definition is paused, has no schedule any more,
  or was removed from the files; unpaused when it is back. Nothing is ever deleted: a paused
  schedule keeps its history and an operator deletes it deliberately.

Overlap policy: ALLOW_ALL. Every fire is its own unit of work with its own idempotency key
(`scheduled:{fire time}`), so two fires running at once cannot emit the same ops_run twice,
and one fire must never cost another: SKIP drops a fire while the previous one is still
waiting for a database or a worker (exactly the "later days left the queue empty" failure
the per-fire key fixes), and BUFFER_ONE drops every fire after the first buffered one and
makes each fire wait for its predecessor.

No execution timeout on the action: a fire started while no worker polls (the worker is
being deployed, or down for hours) waits in Temporal and runs when a worker is back; a
timeout would end it as nothing. Each fire's steps are bounded and retried on their own
(workflow.py).

Catch-up window: ACTIVITY_CORE_SCHEDULE_CATCHUP_SECONDS, 24 hours by default. When the
Temporal server itself was away at a fire time (in development the worker starts and stops
the dev server, so a worker away is a server away), a fire missed by less than the window
runs when the server is back, with its own scheduled time (hence its own ops runs). 24 h
covers a server down overnight or for a working day, so a daily automation's fire is never
lost to an ordinary outage; fires missed by more are skipped (Temporal counts them in the
schedule's `missed_catchup_window`) rather than flooding the queue with stale work, and an
operator can backfill them deliberately (`temporal schedule backfill`). Changing the
setting changes every schedule at the next sync.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleHandle,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.converter import default as default_converter
from temporalio.service import RPCError, RPCStatusCode

from activity_core.definitions.model import ActivityDefinitionSpec
from activity_core.settings import ActivityCoreSettings
from activity_core.temporal.client import temporal_client
from activity_core.temporal.payloads import SCHEDULED_TRIGGER, WORKFLOW_NAME, RunActivityInput

__all__ = [
    "MEMO_KEY",
    "NOTE_PAUSED",
    "NOTE_REMOVED",
    "NOTE_UNSCHEDULED",
    "OVERLAP_POLICY",
    "ApplyReport",
    "DesiredSchedule",
    "TemporalScheduleApplier",
    "catchup_window_of",
    "desired_schedule",
    "open_schedule_applier",
    "schedule_id",
]

log = logging.getLogger("activity_core.temporal")

OVERLAP_POLICY = ScheduleOverlapPolicy.ALLOW_ALL
# the action's memo carries what we applied, so a re-sync can tell whether anything changed
# (Temporal answers a cron spec back as compiled calendars, not as the expression)
MEMO_KEY = "activity_core_schedule"

NOTE_PAUSED = "activity-core: the definition is paused"
NOTE_UNSCHEDULED = "activity-core: the definition has no schedule any more"
NOTE_REMOVED = "activity-core: the definition was removed from the definition files"


def schedule_id(slug: str) -> str:
    return f"activity:{slug}"


@dataclass(frozen=True)
class DesiredSchedule:
    slug: str
    cron: str
    timezone: str
    task_queue: str
    paused: bool
    catchup_window: timedelta

    @property
    def schedule_id(self) -> str:
        return schedule_id(self.slug)

    @property
    def applied(self) -> dict[str, Any]:
        """What we write to the memo, and compare on the next sync."""
        fields = {
            "cron": self.cron,
            "timezone": self.timezone,
            "task_queue": self.task_queue,
            "workflow": WORKFLOW_NAME,
            "trigger_key": SCHEDULED_TRIGGER,
            "overlap": OVERLAP_POLICY.name,
            "catchup_seconds": int(self.catchup_window.total_seconds()),
            # none: a fire waits for its worker (older builds set one hour)
            "execution_timeout": None,
        }
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return {**fields, "digest": hashlib.sha256(canonical.encode()).hexdigest()}

    def to_schedule(self, state: ScheduleState | None = None) -> Schedule:
        return Schedule(
            action=ScheduleActionStartWorkflow(
                WORKFLOW_NAME,
                RunActivityInput(activity_slug=self.slug, trigger_key=SCHEDULED_TRIGGER),
                id=self.schedule_id,
                task_queue=self.task_queue,
                memo={MEMO_KEY: self.applied},
            ),
            spec=ScheduleSpec(cron_expressions=[self.cron], time_zone_name=self.timezone),
            policy=SchedulePolicy(overlap=OVERLAP_POLICY, catchup_window=self.catchup_window),
            state=state or ScheduleState(paused=self.paused, note=self.note),
        )

    @property
    def note(self) -> str | None:
        return NOTE_PAUSED if self.paused else None


@dataclass
class ApplyReport:
    created: list[str]
    updated: list[str]
    paused: list[str]
    unpaused: list[str]
    unchanged: list[str]


def desired_schedule(
    spec: ActivityDefinitionSpec, *, task_queue: str, catchup_window: timedelta
) -> DesiredSchedule | None:
    """The schedule a definition asks for, or None when it is fired manually only."""
    if spec.schedule is None:
        return None
    return DesiredSchedule(
        slug=spec.id,
        cron=spec.schedule.cron,
        timezone=spec.schedule.timezone,
        task_queue=task_queue,
        paused=spec.paused,
        catchup_window=catchup_window,
    )


class TemporalScheduleApplier:
    """Implements the definitions' `ScheduleApplier` protocol against a Temporal client."""

    def __init__(self, client: Client, *, task_queue: str, catchup_window: timedelta) -> None:
        self._client = client
        self._task_queue = task_queue
        self._catchup_window = catchup_window
        self.last_report: ApplyReport | None = None

    def handle(self, slug: str) -> ScheduleHandle:
        return self._client.get_schedule_handle(schedule_id(slug))

    async def apply(
        self, specs: Sequence[ActivityDefinitionSpec], *, removed: Sequence[str] = ()
    ) -> None:
        report = ApplyReport([], [], [], [], [])
        for spec in specs:
            desired = desired_schedule(
                spec, task_queue=self._task_queue, catchup_window=self._catchup_window
            )
            if desired is None:
                await self._pause_if_present(spec.id, NOTE_UNSCHEDULED, report)
            else:
                await self._converge(desired, report)
        for slug in removed:
            await self._pause_if_present(slug, NOTE_REMOVED, report)
        self.last_report = report
        log.info(
            "schedules applied: %d created, %d updated, %d paused, %d unpaused, %d unchanged",
            len(report.created),
            len(report.updated),
            len(report.paused),
            len(report.unpaused),
            len(report.unchanged),
        )

    async def _converge(self, desired: DesiredSchedule, report: ApplyReport) -> None:
        handle = self.handle(desired.slug)
        try:
            await self._client.create_schedule(desired.schedule_id, desired.to_schedule())
        except ScheduleAlreadyRunningError:
            pass
        else:
            report.created.append(desired.slug)
            return

        changed = False

        def update(current: ScheduleUpdateInput) -> ScheduleUpdate | None:
            nonlocal changed
            if _applied_digest(current.description.schedule) == desired.applied["digest"]:
                return None
            changed = True
            # spec, action and policy are ours; pause state is handled below, with its note
            return ScheduleUpdate(schedule=desired.to_schedule(current.description.schedule.state))

        await handle.update(update)
        if changed:
            report.updated.append(desired.slug)
        state = (await handle.describe()).schedule.state
        if desired.paused and not state.paused:
            await handle.pause(note=NOTE_PAUSED)
            report.paused.append(desired.slug)
        elif not desired.paused and state.paused:
            await handle.unpause(note="activity-core: the definition is scheduled again")
            report.unpaused.append(desired.slug)
        elif not changed:
            report.unchanged.append(desired.slug)

    async def _pause_if_present(self, slug: str, note: str, report: ApplyReport) -> None:
        handle = self.handle(slug)
        try:
            state = (await handle.describe()).schedule.state
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return
            raise
        if not state.paused:
            await handle.pause(note=note)
            report.paused.append(slug)


def _applied_digest(schedule: Schedule) -> str | None:
    action = schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow):
        return None
    raw = action.memo.get(MEMO_KEY) if action.memo else None
    if raw is None:
        return None
    try:
        value = default_converter().payload_converter.from_payload(raw)
    except Exception:  # an unreadable memo is not ours as we wrote it: rewrite it
        return None
    digest = value.get("digest") if isinstance(value, dict) else None
    return digest if isinstance(digest, str) else None


@contextlib.asynccontextmanager
async def open_schedule_applier(
    settings: ActivityCoreSettings,
) -> AsyncIterator[TemporalScheduleApplier]:
    """The applier `sync-definitions` uses: connected to TEMPORAL_ADDRESS, or to the local
    dev server under the state dir (started for the duration when nobody runs one).

    Raises TemporalUnavailable (one line) when Temporal cannot be reached.
    """
    async with temporal_client(settings) as client:
        yield TemporalScheduleApplier(
            client,
            task_queue=settings.temporal_task_queue,
            catchup_window=catchup_window_of(settings),
        )


def catchup_window_of(settings: ActivityCoreSettings) -> timedelta:
    """ACTIVITY_CORE_SCHEDULE_CATCHUP_SECONDS as the schedules' catch-up window."""
    return timedelta(seconds=settings.schedule_catchup_seconds)
