"""Durable fires, on the real Temporal dev server and real PostgreSQL: a fire ends emitted,
or failed with a reason an operator sees, never as nothing.

- the sink is its own step: every item of a batch is queued while the sink is down, and
  written once when it is back; a sink that stays down for the retry window is recorded
  as failed, and `retry_fire` sends it again without a second ops run;
- a fire that fails (final, or a bug retried a few times) shows its reason in the runs
  JSON and the ops UI;
- a fire waits for its worker: no execution timeout on schedules or manual fires;
- the schedules' catch-up window is the setting, and Temporal holds to it across its own
  restart (a missed fire inside the window runs, one outside is skipped).

Durations are shortened through the settings (retry intervals of 1 s, windows of
seconds); the defaults they stand for are hours (README, "Definitions, schedules and fires").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleOverlapPolicy,
    WorkflowFailureError,
)

from ac_temporal_kit import TemporalHarness, definition, start_worker_harness
from ac_testkit import AppClient
from activity_core.db.pool import create_pool
from activity_core.definitions.sync import sync_definitions
from activity_core.temporal.client import connect
from activity_core.temporal.dev_server import DevServer, free_port, start_dev_server
from activity_core.temporal.schedules import TemporalScheduleApplier
from activity_core.temporal.worker import build_activities, build_worker

T = TypeVar("T")

FAST = {"ACTIVITY_CORE_FIRE_RETRY_MAX_SECONDS": "1", "ACTIVITY_CORE_SINK_RETRY_MAX_SECONDS": "1"}
SINK_DOWN = 10**6  # ScriptedSink failures: down until a test sets 0


@asynccontextmanager
async def worker_with(
    client: Client, server: DevServer, db_dsn: str, **env: str
) -> AsyncIterator[TemporalHarness]:
    harness, worker = await start_worker_harness(
        client, db_dsn, TEMPORAL_ADDRESS=server.address, **{**FAST, **env}
    )
    try:
        async with worker:
            yield harness
    finally:
        await harness.pool.close()


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, what: str, timeout: float = 30.0
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        await asyncio.sleep(0.2)


async def fire_row(pool: asyncpg.Pool, run_id: str) -> asyncpg.Record | None:
    return await pool.fetchrow("SELECT * FROM activity_runs WHERE run_id = $1", run_id)


async def runs_json(api: AppClient, slug: str, run_id: str) -> dict[str, Any]:
    response = await api.http.get(
        f"/ops/automations/{slug}/runs/{run_id}", headers=api.operator_headers()
    )
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()["run"]
    return run


async def ui_page(api: AppClient, path: str) -> str:
    response = await api.http.get(path, headers=api.operator_headers())
    assert response.status_code == 200, response.text
    return response.text


# -- the sink: its own step ---------------------------------------------------------------


async def test_every_item_of_a_batch_is_queued_while_the_sink_is_down_and_written_once_back(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str, api: AppClient
) -> None:
    async with worker_with(temporal_client, temporal_server, db_dsn) as temporal:
        await temporal.sync(definition(temporal.slug, cron=None, rules=3))
        temporal.sink.failures = SINK_DOWN
        handle = await temporal.start_fire(temporal.slug)
        run_id = handle.first_execution_run_id or ""

        # the sink is down, yet the fire is emitted: every item queued, with its audit row
        emitted = await eventually(
            lambda: _with_status(temporal.pool, run_id, "emitted"), what="the fire to emit"
        )
        assert emitted["emitted_count"] == 3
        ops = await temporal.ops_runs()
        assert sorted(r["source_id"] for r in ops) == ["daily-brief", "rule-2", "rule-3"]
        assert {r["state"] for r in ops} == {"open"}
        audit = await temporal.pool.fetch("SELECT * FROM task_spawn_log ORDER BY id")
        assert [(r["outcome"], r["sink_status"]) for r in audit] == [("created", "pending")] * 3
        await eventually(lambda: _sink_tried(temporal.pool), what="a sink attempt to be recorded")
        assert temporal.sink.published == []
        shown = await runs_json(api, temporal.slug, run_id)
        assert shown["status"] == "emitted"
        assert shown["sink_writes"]["pending"] == 3
        assert shown["sink_writes"]["written"] == 0
        assert "scripted sink outage" in shown["sink_writes"]["error"]
        assert len(shown["ops_runs"]) == 3

        # the sink comes back: each task written once, nothing emitted twice
        temporal.sink.failures = 0
        result = await temporal.result(handle)
        assert (result.emitted_count, result.sink_written, result.sink_failed) == (3, 3, 0)
        assert sorted(t.idempotency_key for t in temporal.sink.published) == sorted(
            r["idempotency_key"] for r in ops
        )
        assert sorted(str(t.ops_run_id) for t in temporal.sink.published) == sorted(
            str(r["id"]) for r in ops
        )
        assert len(await temporal.ops_runs()) == 3
        shown = await runs_json(api, temporal.slug, run_id)
        assert shown["sink_writes"] == {"written": 3, "pending": 0, "failed": 0, "error": None}


async def _with_status(pool: asyncpg.Pool, run_id: str, status: str) -> asyncpg.Record | None:
    row = await fire_row(pool, run_id)
    return row if row is not None and row["status"] == status else None


async def _sink_tried(pool: asyncpg.Pool) -> bool:
    return bool(
        await pool.fetchval("SELECT count(*) FROM task_spawn_log WHERE sink_error IS NOT NULL")
    )


async def test_a_sink_down_for_its_whole_window_is_recorded_failed_and_a_retry_sends_it(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str, api: AppClient
) -> None:
    async with worker_with(
        temporal_client, temporal_server, db_dsn, ACTIVITY_CORE_SINK_RETRY_WINDOW_SECONDS="3"
    ) as temporal:
        await temporal.sync(definition(temporal.slug, cron=None))
        temporal.sink.failures = SINK_DOWN
        handle = await temporal.start_fire(temporal.slug)
        result = await temporal.result(handle)
        run_id = handle.first_execution_run_id or ""

        # the fire emitted (its run is queued); its sink write failed, with the reason
        assert (result.emitted_count, result.sink_written, result.sink_failed) == (1, 0, 1)
        assert temporal.sink.calls >= 1
        [ops] = await temporal.ops_runs()
        assert ops["state"] == "open"
        [row] = await temporal.pool.fetch("SELECT * FROM task_spawn_log")
        assert row["sink_status"] == "failed"
        assert "scripted sink outage" in row["sink_error"]
        shown = await runs_json(api, temporal.slug, run_id)
        assert shown["status"] == "emitted"
        assert shown["sink_writes"]["failed"] == 1
        assert "scripted sink outage" in shown["sink_writes"]["error"]
        page = await ui_page(api, f"/ops/ui/automations/{temporal.slug}/runs/{run_id}")
        assert "Issue sink writes failed" in page
        assert "scripted sink outage" in page
        assert f"activity-core retry-fire {temporal.slug} {run_id}" in page

        # the sink is back; the operator retries the fire: same keys, the write is sent
        temporal.sink.failures = 0
        retried = await temporal.retry_fire(run_id)
        again = await temporal.closed(retried.workflow_id, retried.run_id)
        assert again.triggering_event_id == result.triggering_event_id
        assert (again.emitted_count, again.sink_written, again.sink_failed) == (1, 1, 0)
        assert [r["id"] for r in await temporal.ops_runs()] == [ops["id"]]
        [published] = temporal.sink.published
        assert published.idempotency_key == ops["idempotency_key"]
        assert published.ops_run_id == ops["id"]
        rows = await temporal.pool.fetch("SELECT * FROM task_spawn_log ORDER BY id")
        assert [(r["outcome"], r["sink_status"]) for r in rows] == [
            ("created", "written"),
            ("duplicate", "none"),
        ]
        shown = await runs_json(api, temporal.slug, retried.run_id)
        assert shown["retry_of"] == run_id
        assert shown["sink_writes"] == {"written": 1, "pending": 0, "failed": 0, "error": None}
        assert (await runs_json(api, temporal.slug, run_id))["sink_writes"]["written"] == 1


# -- a fire that fails says why --------------------------------------------------------------


async def test_a_fire_that_fails_shows_its_reason_in_the_runs_json_and_the_ui(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str, api: AppClient
) -> None:
    async with worker_with(
        temporal_client,
        temporal_server,
        db_dsn,
        ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE="true",
    ) as temporal:
        # synced while the flag was off; the worker now requires a harness profile
        await temporal.sync(definition(temporal.slug, cron=None, profile=None))
        handle = await temporal.start_fire(temporal.slug)
        with pytest.raises(WorkflowFailureError):
            await temporal.result(handle)
        run_id = handle.first_execution_run_id or ""

    shown = await runs_json(api, temporal.slug, run_id)
    assert shown["status"] == "failed"
    assert shown["error"].startswith("EmissionPolicyError: emission of ")
    assert "harness_profile_ref" in shown["error"]
    assert shown["finished_at"] is not None
    assert shown["ops_runs"] == []
    page = await ui_page(api, f"/ops/ui/automations/{temporal.slug}/runs/{run_id}")
    assert 'data-field="fire_error">EmissionPolicyError: emission of ' in page
    assert f"activity-core retry-fire {temporal.slug} {run_id}" in page
    listing = await ui_page(api, f"/ops/ui/automations/{temporal.slug}")
    assert 'data-field="fire_error">EmissionPolicyError' in listing
    index = await api.http.get("/ops/automations", headers=api.operator_headers())
    [mine] = [a for a in index.json()["automations"] if a["slug"] == temporal.slug]
    assert mine["last_fire"]["status"] == "failed"
    assert mine["last_fire"]["error"].startswith("EmissionPolicyError")


async def test_an_unexpected_error_is_retried_a_few_times_then_the_fire_fails_with_it(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str, api: AppClient
) -> None:
    async with worker_with(temporal_client, temporal_server, db_dsn) as temporal:
        await temporal.sync(definition(temporal.slug, cron=None))
        # a bug stand-in: every insert of an ops run raises
        await temporal.pool.execute(
            """
            CREATE FUNCTION refuse_runs() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'a bug in the emission'; END $$;
            CREATE TRIGGER refuse_runs BEFORE INSERT ON ops_runs
                FOR EACH ROW EXECUTE FUNCTION refuse_runs();
            """
        )
        handle = await temporal.start_fire(temporal.slug)
        run_id = handle.first_execution_run_id or ""
        # while it retries, the fire says what it is retrying on
        retrying = await eventually(
            lambda: _with_status(temporal.pool, run_id, "started"), what="the fire's record"
        )
        assert retrying is not None
        noted = await eventually(
            lambda: _error_of(temporal.pool, run_id), what="the retry to be noted"
        )
        assert noted.startswith("retrying (attempt ")
        assert "a bug in the emission" in noted

        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=60)
        row = await fire_row(temporal.pool, run_id)
        assert row is not None and row["status"] == "failed"
        assert row["error"].startswith(
            "UnexpectedError: emission: RaiseError: a bug in the emission"
        )
        shown = await runs_json(api, temporal.slug, run_id)
        assert shown["error"] == row["error"]
        assert await temporal.ops_runs() == []


async def _error_of(pool: asyncpg.Pool, run_id: str) -> str | None:
    row = await fire_row(pool, run_id)
    return row["error"] if row is not None else None


# -- a fire waits for its worker ------------------------------------------------------------


async def _no_timeout(client: Client, workflow_id: str, run_id: str | None) -> None:
    described = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    config = described.raw_description.execution_config
    assert config.workflow_execution_timeout.ToTimedelta() == timedelta(0), workflow_id
    assert config.workflow_run_timeout.ToTimedelta() == timedelta(0), workflow_id


async def test_fires_started_while_no_worker_polls_wait_without_a_timeout_and_then_emit(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str, api: AppClient
) -> None:
    harness, worker = await start_worker_harness(
        temporal_client, db_dsn, TEMPORAL_ADDRESS=temporal_server.address, **FAST
    )
    try:
        await harness.sync(definition(harness.slug, cron="0 3 1 1 *"))  # never due in a test
        # a scheduled fire (the schedule's own action) and a manual one, with no worker
        schedule = harness.applier.handle(harness.slug)
        await schedule.trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL)
        manual = await harness.fire_manual({"correlation_id": "c-2"})
        scheduled = await eventually(
            lambda: _first_action(schedule), what="the schedule to start its fire"
        )
        for workflow_id, run_id in (
            (scheduled.workflow_id, scheduled.first_execution_run_id),
            (manual.workflow_id, manual.run_id),
        ):
            await _no_timeout(temporal_client, workflow_id, run_id)
        await asyncio.sleep(2.0)
        assert await harness.activity_runs() == []  # nothing ran: no worker

        async with worker:
            await harness.wait_for_workflows(2, timeout=30)
        runs = await harness.activity_runs()
        assert sorted(r["status"] for r in runs) == ["emitted", "emitted"]
        assert sorted(r["trigger_key"] for r in runs) == sorted(["scheduled", manual.trigger_key])
        assert len(await harness.ops_runs()) == 2
    finally:
        await harness.pool.close()


async def _first_action(schedule: Any) -> ScheduleActionExecutionStartWorkflow | None:
    actions = (await schedule.describe()).info.recent_actions
    action = actions[0].action if actions else None
    return action if isinstance(action, ScheduleActionExecutionStartWorkflow) else None


# -- the catch-up window --------------------------------------------------------------------


async def test_the_catch_up_window_is_the_setting_and_a_sync_applies_a_change(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str
) -> None:
    async with worker_with(
        temporal_client, temporal_server, db_dsn, ACTIVITY_CORE_SCHEDULE_CATCHUP_SECONDS="120"
    ) as temporal:
        spec = definition(temporal.slug)
        await temporal.sync(spec)
        handle = temporal.applier.handle(spec.id)
        assert (await handle.describe()).schedule.policy.catchup_window == timedelta(seconds=120)

        wider = TemporalScheduleApplier(
            temporal.client, task_queue=temporal.task_queue, catchup_window=timedelta(hours=3)
        )
        await sync_definitions(temporal.pool, [spec], wider)
        assert wider.last_report is not None and wider.last_report.updated == [spec.id]
        assert (await handle.describe()).schedule.policy.catchup_window == timedelta(hours=3)
        await handle.delete()


@pytest.mark.timeout(240)
async def test_temporal_down_over_a_fire_time_catches_it_up_only_within_the_window(
    tmp_path: Path, db_dsn: str
) -> None:
    """Temporal itself away across a fire (in development the worker starts and stops the
    dev server: a worker away is a server away). Two schedules of the same cron, windows of
    5 minutes and of 10 s (Temporal's minimum); the server is back 25 s after the fire
    time: the first takes the missed fire, with its own scheduled time; the second skips
    it and counts it missed."""
    directory, port = tmp_path / "temporal", free_port()
    server = await asyncio.to_thread(start_dev_server, directory, port=port)
    pool = await create_pool(db_dsn, min_size=1, max_size=3)
    try:
        client = await connect(server.address, "default")
        harness, _ = await start_worker_harness(
            client, db_dsn, TEMPORAL_ADDRESS=server.address, **FAST
        )
        await harness.pool.close()
        wide, narrow = f"{harness.slug}-wide", f"{harness.slug}-narrow"
        specs = [definition(wide, cron="* * * * *"), definition(narrow, cron="* * * * *")]
        await sync_definitions(pool, specs, _NoSchedules())

        # the next minute with time to set up before it; the server stops 15 s before it
        # (a slow stop on a loaded machine still ends before) and is back 25 s after it
        # (15 s past the narrow window)
        fire_at = _next_minute(datetime.now(UTC) + timedelta(seconds=25))
        await _sleep_until(fire_at - timedelta(seconds=22))
        for spec, window in ((specs[0], timedelta(minutes=5)), (specs[1], timedelta(seconds=10))):
            applier = TemporalScheduleApplier(
                client, task_queue=harness.task_queue, catchup_window=window
            )
            await applier.apply([spec])
        await _sleep_until(fire_at - timedelta(seconds=15))
        await asyncio.to_thread(server.stop)
        assert datetime.now(UTC) < fire_at, "the server stopped too late for this test"
        await _sleep_until(fire_at + timedelta(seconds=25))
        server = await asyncio.to_thread(start_dev_server, directory, port=port)

        client = await connect(server.address, "default")
        wide_handle = client.get_schedule_handle(f"activity:{wide}")
        narrow_handle = client.get_schedule_handle(f"activity:{narrow}")

        async def caught_up() -> bool:
            actions = (await wide_handle.describe()).info.recent_actions
            return any(a.scheduled_at == fire_at for a in actions)

        await eventually(caught_up, what="the wide schedule to take the missed fire")
        narrow_info = (await narrow_handle.describe()).info
        assert narrow_info.num_actions_missed_catchup_window >= 1
        assert all(a.scheduled_at != fire_at for a in narrow_info.recent_actions)

        # a worker on the restarted server emits the caught-up fire as that fire
        activities = build_activities(harness.settings, pool, harness.sink)
        worker = build_worker(client, task_queue=harness.task_queue, activities=activities)
        async with worker:
            emitted = await eventually(
                lambda: pool.fetchrow(
                    """SELECT r.* FROM activity_runs r JOIN activity_definitions d
                         ON d.id = r.activity_definition_id
                       WHERE d.slug = $1 AND r.scheduled_for = $2 AND r.status = 'emitted'""",
                    wide,
                    fire_at,
                ),
                what="the caught-up fire to emit",
            )
        assert emitted["triggering_event_id"] == f"scheduled:{fire_at.isoformat()}"
        missed = await pool.fetchval(
            """SELECT count(*) FROM activity_runs r JOIN activity_definitions d
                 ON d.id = r.activity_definition_id
               WHERE d.slug = $1 AND r.scheduled_for = $2""",
            narrow,
            fire_at,
        )
        assert missed == 0
        for handle in (wide_handle, narrow_handle):
            await handle.delete()
    finally:
        await pool.close()
        await asyncio.to_thread(server.stop)


class _NoSchedules:
    async def apply(self, specs: Any, *, removed: Any = ()) -> None:
        return None


def _next_minute(after: datetime) -> datetime:
    return after.replace(second=0, microsecond=0) + timedelta(minutes=1)


async def _sleep_until(moment: datetime) -> None:
    await asyncio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


async def test_a_retried_scheduled_fire_keeps_its_scheduled_time_and_keys(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str
) -> None:
    async with worker_with(temporal_client, temporal_server, db_dsn) as temporal:
        await temporal.sync(definition(temporal.slug, cron="0 3 1 1 *", timezone="UTC"))
        schedule = temporal.applier.handle(temporal.slug)
        await schedule.trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL)
        [first_run] = await temporal.wait_for_workflows(1)
        [original] = await temporal.activity_runs()
        assert original["status"] == "emitted" and original["scheduled_for"] is not None

        retried = await temporal.retry_fire(first_run)
        again = await temporal.closed(retried.workflow_id, retried.run_id)
        assert again.triggering_event_id == original["triggering_event_id"]
        retry = await fire_row(temporal.pool, retried.run_id)
        assert retry is not None
        assert (retry["trigger_key"], retry["scheduled_for"], retry["retry_of"]) == (
            "scheduled",
            original["scheduled_for"],
            first_run,
        )
        assert retry["context"] == original["context"]
        [ops] = await temporal.ops_runs()
        outcomes = await temporal.pool.fetch("SELECT outcome FROM task_spawn_log ORDER BY id")
        assert [r["outcome"] for r in outcomes] == ["created", "duplicate"]
        assert ops["triggering_event_id"] == original["triggering_event_id"]


async def test_retry_fire_of_a_fire_that_does_not_exist_is_one_line(
    temporal: TemporalHarness,
    temporal_server: DevServer,
    db_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from activity_core import cli

    await temporal.sync(definition(temporal.slug, cron=None))
    monkeypatch.setenv("ACTIVITY_CORE_DATABASE_URL", db_dsn)
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)
    for automation, fire, line in (
        ("no-such-automation", "run-1", "no automation 'no-such-automation'"),
        (temporal.slug, "run-1", f"automation '{temporal.slug}' has no fire 'run-1'"),
    ):
        code = await asyncio.to_thread(cli.main, ["retry-fire", automation, fire])
        captured = capsys.readouterr()
        assert code == 1
        assert captured.err.strip().splitlines() == [f"activity-core: {line}"]
        assert captured.out == ""
