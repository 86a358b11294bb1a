"""Schedules follow the definitions on every sync: created, updated when the cron or the
timezone changes, paused when the definition is paused, unscheduled or removed (never
deleted), unpaused when it is back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.client import (
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleDescription,
    ScheduleOverlapPolicy,
    ScheduleRange,
)
from temporalio.converter import default as default_converter
from temporalio.service import RPCError, RPCStatusCode

from ac_temporal_kit import TemporalHarness, definition
from activity_core.temporal.schedules import (
    NOTE_PAUSED,
    NOTE_REMOVED,
    NOTE_UNSCHEDULED,
    schedule_id,
)


def calendar(described: ScheduleDescription) -> ScheduleCalendarSpec:
    [only] = described.schedule.spec.calendars
    return only


def one(value: int) -> tuple[ScheduleRange, ...]:
    return (ScheduleRange(start=value, end=value, step=1),)


async def test_sync_creates_updates_and_pauses_schedules(temporal: TemporalHarness) -> None:
    spec = await temporal.define(cron="0 6 * * 1-5", timezone="Europe/Berlin")
    assert temporal.applier.last_report is not None
    assert temporal.applier.last_report.created == [spec.id]
    handle = temporal.applier.handle(spec.id)
    assert handle.id == schedule_id(spec.id) == f"activity:{spec.id}"

    described = await handle.describe()
    action = described.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.workflow == "RunActivityWorkflow"
    assert action.task_queue == temporal.task_queue
    assert action.id == f"activity:{spec.id}"
    [arg] = default_converter().payload_converter.from_payloads(list(action.args))
    assert arg == {
        "activity_slug": spec.id,
        "trigger_key": "scheduled",
        "request": None,
        "retry_of": None,
        "triggering_event_id": None,
        "scheduled_for": None,
    }
    assert described.schedule.spec.time_zone_name == "Europe/Berlin"
    assert calendar(described).hour == one(6)
    assert calendar(described).minute == one(0)
    assert calendar(described).day_of_week == (ScheduleRange(start=1, end=5, step=1),)
    assert described.schedule.policy.overlap == ScheduleOverlapPolicy.ALLOW_ALL
    # the default catch-up window (a day), and no execution timeout that would end a fire
    # waiting for its worker
    assert described.schedule.policy.catchup_window == timedelta(days=1)
    assert action.execution_timeout is None
    assert action.run_timeout is None
    assert not described.schedule.state.paused

    # the same definitions again: nothing changes
    await temporal.sync(spec)
    assert temporal.applier.last_report.unchanged == [spec.id]

    # a new cron and timezone: the schedule is updated in place
    moved = definition(temporal.slug, cron="30 7 * * *", timezone="America/New_York")
    await temporal.sync(moved)
    assert temporal.applier.last_report.updated == [spec.id]
    described = await handle.describe()
    assert described.schedule.spec.time_zone_name == "America/New_York"
    assert calendar(described).hour == one(7)
    assert calendar(described).minute == one(30)
    assert not described.schedule.state.paused

    # paused in the file: paused with a note; unpaused when the flag goes away
    await temporal.sync(definition(temporal.slug, cron="30 7 * * *", paused=True))
    state = (await handle.describe()).schedule.state
    assert state.paused
    assert state.note == NOTE_PAUSED
    await temporal.sync(moved)
    assert not (await handle.describe()).schedule.state.paused
    assert temporal.applier.last_report.unpaused == [spec.id]

    # the schedule removed from the definition: paused, not deleted
    await temporal.sync(definition(temporal.slug, cron=None))
    state = (await handle.describe()).schedule.state
    assert state.paused
    assert state.note == NOTE_UNSCHEDULED

    # the definition file removed: still paused (with why), still there
    await temporal.sync(moved)
    assert not (await handle.describe()).schedule.state.paused
    await temporal.sync()
    state = (await handle.describe()).schedule.state
    assert state.paused
    assert state.note == NOTE_REMOVED
    assert temporal.applier.last_report.paused == [spec.id]

    # and back again
    await temporal.sync(moved)
    assert not (await handle.describe()).schedule.state.paused

    await handle.delete()


async def test_manual_only_definitions_get_no_schedule(temporal: TemporalHarness) -> None:
    spec = await temporal.define(cron=None)
    assert temporal.applier.last_report is not None
    assert temporal.applier.last_report.created == []
    with pytest.raises(RPCError) as missing:
        await temporal.applier.handle(spec.id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND
