"""The spec's per-fire bug, as a regression test against a real Temporal schedule.

Every fire of a schedule carries the sentinel trigger_key "scheduled". Used as the
triggering event id it gave all fires after the first the first one's idempotency key, so
only the first weekday created an ops_run. Two consecutive fires must make two ops_runs;
replaying one fire (same scheduled time) must make none.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleBackfill,
    ScheduleHandle,
    ScheduleOverlapPolicy,
)
from temporalio.worker import Replayer

from ac_temporal_kit import TemporalHarness
from activity_core.temporal.payloads import RunActivityResult
from activity_core.temporal.workflow import RunActivityWorkflow

# Monday and Tuesday 06:00 Europe/Berlin (CET, UTC+1) are 05:00 UTC.
MONDAY = datetime(2026, 1, 5, 5, 0, tzinfo=UTC)
TUESDAY = datetime(2026, 1, 6, 5, 0, tzinfo=UTC)


async def backfill(handle: ScheduleHandle, start: datetime, end: datetime) -> None:
    await handle.backfill(
        ScheduleBackfill(start_at=start, end_at=end, overlap=ScheduleOverlapPolicy.ALLOW_ALL)
    )


async def fired(
    harness: TemporalHarness, handle: ScheduleHandle, times: set[datetime], count: int
) -> list[Any]:
    """Wait for `count` actions of the schedule at `times`; answer their workflow results."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        actions = [
            a for a in (await handle.describe()).info.recent_actions if a.scheduled_at in times
        ]
        if len(actions) >= count:
            break
        assert asyncio.get_running_loop().time() < deadline, f"{len(actions)}/{count} fires"
        await asyncio.sleep(0.2)
    results = []
    for action in actions:
        started = action.action
        assert isinstance(started, ScheduleActionExecutionStartWorkflow)
        handle_wf = harness.client.get_workflow_handle(
            started.workflow_id,
            run_id=started.first_execution_run_id,
            result_type=RunActivityResult,
        )
        results.append(await harness.result(handle_wf))
    return results


async def test_two_fires_make_two_ops_runs_and_a_replayed_fire_makes_none(
    temporal: TemporalHarness,
) -> None:
    spec = await temporal.define(cron="0 6 * * 1-5", timezone="Europe/Berlin")
    handle = temporal.applier.handle(spec.id)
    described = await handle.describe()
    assert isinstance(described.schedule.action, ScheduleActionStartWorkflow)

    await backfill(handle, MONDAY - timedelta(hours=5), TUESDAY + timedelta(hours=12))
    results = await fired(temporal, handle, {MONDAY, TUESDAY}, 2)

    expected = {f"scheduled:{MONDAY.isoformat()}", f"scheduled:{TUESDAY.isoformat()}"}
    assert {r.triggering_event_id for r in results} == expected
    assert all(r.emitted_count == 1 for r in results)

    runs = [r for r in await temporal.activity_runs() if r["triggering_event_id"] in expected]
    assert len(runs) == 2
    assert len({r["run_id"] for r in runs}) == 2
    assert [r["scheduled_for"] for r in runs] == [MONDAY, TUESDAY]
    assert all(r["trigger_key"] == "scheduled" and r["status"] == "emitted" for r in runs)
    assert runs[0]["context"] == {"schedule": {"scheduled_for": MONDAY.isoformat()}}

    ops = [r for r in await temporal.ops_runs() if r["triggering_event_id"] in expected]
    assert {r["triggering_event_id"] for r in ops} == expected
    assert {r["idempotency_key"] for r in ops} == {
        f"{spec.id}:daily-brief:{event}" for event in expected
    }
    assert {r["title"] for r in ops} == {
        "Research brief for 2026-01-05",
        "Research brief for 2026-01-06",
    }

    # The same fire again (a replayed backfill of Monday): a new workflow run and a new
    # activity_run, but the per-fire key already exists, so no second ops_run.
    await backfill(handle, MONDAY - timedelta(hours=1), MONDAY + timedelta(hours=1))
    results = await fired(temporal, handle, {MONDAY, TUESDAY}, 3)
    runs = [r for r in await temporal.activity_runs() if r["triggering_event_id"] in expected]
    assert len(runs) == 3
    assert [r["scheduled_for"] for r in runs].count(MONDAY) == 2
    ops = [r for r in await temporal.ops_runs() if r["triggering_event_id"] in expected]
    assert len(ops) == 2
    outcomes = await temporal.pool.fetch(
        "SELECT outcome, count(*) AS n FROM task_spawn_log GROUP BY outcome ORDER BY outcome"
    )
    assert {r["outcome"]: r["n"] for r in outcomes} == {"created": 2, "duplicate": 1}

    # The recorded history replays deterministically against today's workflow code.
    first = (await handle.describe()).info.recent_actions[0].action
    assert isinstance(first, ScheduleActionExecutionStartWorkflow)
    history = await temporal.client.get_workflow_handle(
        first.workflow_id, run_id=first.first_execution_run_id
    ).fetch_history()
    await Replayer(workflows=[RunActivityWorkflow]).replay_workflow(history)
