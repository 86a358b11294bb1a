"""Durable fires with real outages: a fire ends with every ops run emitted exactly once, or
as a failure an operator sees and can retry, never as nothing.

Its own deployment (own database, task queue and State Hub stand-in, the session's
Temporal server): `serve` on the database directly, the Temporal worker through a TCP
proxy the test can cut (e2e_kit/tcp_proxy.py), State Hub a stand-in that answers 503 while
it is down (e2e_kit/flaky_hub.py). The fire definition has three rules, so every fire is a
batch of three ops runs. Retry timing is shortened through the settings (1 s between
attempts, a 15 s sink retry window); the defaults are 30 s, 5 min and 24 h.

- PostgreSQL unreachable from the worker for 25 s at fire time (the record step used to
  give up after about 15 s): the fire emits its three ops runs once when it is back;
- State Hub down for a while: all three ops runs are queued while it is down, and each
  task is written to it once when it is back;
- State Hub down past the window: the fire is shown with its sink writes failed and why
  (UI and runs JSON); `activity-core retry-fire` sends them, and queues nothing twice;
- the Temporal worker stopped: a scheduled fire waits (no execution timeout) and emits
  when the worker is back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import textwrap
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from e2e_kit.db import Db, own_database
from e2e_kit.flaky_hub import FlakyHub
from e2e_kit.stack import Stack, new_token
from e2e_kit.tcp_proxy import TcpProxy
from ops_demo.stack import (
    ActivityCoreConfig,
    activity_core_migrate,
    activity_core_serve,
    activity_core_temporal_worker,
    sync_definitions,
)
from ops_devsupport.processes import ManagedProcess, Supervisor, console_script

SLUG = "e2e-durable"
TASK_QUEUE = "e2e-durable"
RULES = ("first", "second", "third")
FAST_RETRIES = {
    "ACTIVITY_CORE_FIRE_RETRY_MAX_SECONDS": "1",
    "ACTIVITY_CORE_SINK_RETRY_MAX_SECONDS": "1",
    "ACTIVITY_CORE_SINK_RETRY_WINDOW_SECONDS": "15",
}
# HEAD's record step gave up after 5 attempts, 1 + 2 + 4 + 8 s apart
DATABASE_OUTAGE_SECONDS = 25


def _definition() -> str:
    rules = "".join(
        textwrap.dedent(
            f"""\
              - id: {rule}
                action:
                  task_template: "{SLUG} {rule} for {{scheduled_for:%Y-%m-%d}}"
                  target_repo: e2e/durable
                  labels: [automated, {SLUG}]
                  harness_profile_ref: harness.agent-dev@1.0.0
            """
        )
        for rule in RULES
    )
    return (
        f"id: {SLUG}\ntitle: E2E durable fires\n"
        # never due during a test run: the scenarios fire it themselves
        'schedule: {cron: "0 3 1 1 *", timezone: Europe/Berlin}\n'
        f"rules:\n{rules}"
    )


class Deployment:
    def __init__(self, stack: Stack, proxy: TcpProxy, hub: FlakyHub) -> None:
        self.stack = stack
        self.proxy = proxy
        self.hub = hub

    @property
    def worker(self) -> ManagedProcess:
        assert self.stack.temporal_worker is not None
        return self.stack.temporal_worker

    def fire(self) -> str:
        return self.stack.fire(SLUG)

    def detail(self, run_id: str) -> dict[str, Any] | None:
        with self.stack.api() as api:
            return api.fire_detail(SLUG, run_id)

    def keys_of(self, triggering_event_id: str) -> list[str]:
        return [f"{SLUG}:{rule}:{triggering_event_id}" for rule in RULES]

    def ops_runs_of(self, triggering_event_id: str) -> list[Any]:
        return [
            r for r in self.stack.ops_runs(SLUG) if r["triggering_event_id"] == triggering_event_id
        ]

    def fire_row(self, run_id: str) -> Any:
        return self.stack.db.fetchrow("SELECT * FROM activity_runs WHERE run_id = $1", run_id)

    def sink_writes(self, run_id: str, count: str, *, timeout: float, what: str) -> Any:
        """The fire's detail, once all three of its State Hub writes are `count` ("written"
        or "failed")."""
        return self.stack.wait(
            lambda: (d := self.detail(run_id)) and d["run"]["sink_writes"][count] == 3 and d,
            timeout=timeout,
            what=what,
        )

    def assert_each_task_written_once(self, triggering_event_id: str) -> None:
        keys = self.keys_of(triggering_event_id)
        assert self.hub.ok_answers(keys) == dict.fromkeys(keys, 1)

    def emitted(self, run_id: str, *, what: str) -> Any:
        """The fire's row, once it is emitted (within 60 s)."""
        return self.stack.wait(
            lambda: (
                (row := self.fire_row(run_id)) is not None and row["status"] == "emitted" and row
            ),
            timeout=60,
            what=what,
        )


@pytest.fixture(scope="module")
def durable(supervisor: Supervisor, e2e_root: Path, temporal: str) -> Iterator[Deployment]:
    root = e2e_root / "durable"
    root.mkdir()
    with own_database(root, "e2e_durable") as dsn:
        proxy = TcpProxy.for_dsn(dsn)
        hub = FlakyHub()
        config = ActivityCoreConfig(
            database_url=dsn,
            temporal_address=temporal,
            operator_token=new_token(),
            task_queue=TASK_QUEUE,
            state_hub_url=hub.url,
            extra=FAST_RETRIES,
        )
        # the Temporal worker reaches PostgreSQL only through the proxy
        worker_config = dataclasses.replace(config, database_url=proxy.dsn(dsn))
        try:
            with supervisor.scope():
                activity_core_migrate(supervisor, config)
                definitions = root / "definitions"
                definitions.mkdir()
                (definitions / f"{SLUG}.yaml").write_text(_definition(), encoding="utf-8")
                stack = Stack(
                    root=root,
                    sup=supervisor,
                    db=Db(dsn),
                    config=config,
                    temporal_address=temporal,
                    hub=hub,  # type: ignore[arg-type]
                    tokens={},
                    profiles=root / "unused-profiles.yaml",
                    repositories=root / "unused-repositories",
                )
                stack.serves.append(activity_core_serve(supervisor, config, name="durable-serve"))
                stack.temporal_worker = activity_core_temporal_worker(
                    supervisor, worker_config, name="durable-temporal-worker"
                )
                synced = sync_definitions(supervisor, config, [definitions])
                assert "definitions synced" in synced.output, synced.output
                yield Deployment(stack, proxy, hub)
                stack.db.close()
        finally:
            proxy.close()
            hub.close()


@pytest.mark.timeout(180)
def test_a_database_outage_at_fire_time_still_emits_every_ops_run_once(
    durable: Deployment,
) -> None:
    durable.proxy.cut()
    try:
        run_id = durable.fire()  # serve reaches the database; the worker does not
        time.sleep(DATABASE_OUTAGE_SECONDS)
        assert durable.fire_row(run_id) is None  # nothing could be recorded meanwhile
        assert durable.proxy.refused > 0  # and the worker kept trying
    finally:
        durable.proxy.restore()

    fire = durable.emitted(run_id, what="the fire to emit once the database is back")
    event = fire["triggering_event_id"]
    runs = durable.ops_runs_of(event)
    assert sorted(r["idempotency_key"] for r in runs) == sorted(durable.keys_of(event))
    assert {r["state"] for r in runs} == {"open"}
    detail = durable.sink_writes(run_id, "written", timeout=30, what="the fire's State Hub writes")
    assert detail["run"]["status"] == "emitted"
    assert detail["run"]["error"] is None
    durable.assert_each_task_written_once(event)
    assert {durable.hub.accepted[key]["ops_run_id"] for key in durable.keys_of(event)} == {
        str(r["id"]) for r in runs
    }


@pytest.mark.timeout(120)
def test_a_state_hub_down_for_a_while_never_holds_up_the_queue_and_gets_each_task_once(
    durable: Deployment,
) -> None:
    stack = durable.stack
    durable.hub.set_down(True)
    refused_before = durable.hub.refused
    try:
        run_id = durable.fire()
        # State Hub is down, yet every item of the batch is queued, with its audit row
        fire = stack.wait(
            lambda: (
                (row := durable.fire_row(run_id)) is not None
                and row["status"] == "emitted"
                and len(durable.ops_runs_of(row["triggering_event_id"])) == 3
                and row
            ),
            timeout=30,
            what="all three ops runs while State Hub is down",
        )
        stack.wait(
            lambda: durable.hub.refused > refused_before,
            timeout=30,
            what="a State Hub write to be refused",
        )
    finally:
        durable.hub.set_down(False)
    event = fire["triggering_event_id"]
    detail = durable.sink_writes(
        run_id, "written", timeout=30, what="each task to be written once State Hub is back"
    )
    assert detail["run"]["sink_writes"] == {"written": 3, "pending": 0, "failed": 0, "error": None}
    assert len(durable.ops_runs_of(event)) == 3
    durable.assert_each_task_written_once(event)


@pytest.mark.timeout(180)
def test_a_state_hub_down_past_the_window_is_shown_failed_and_retry_fire_sends_it(
    durable: Deployment,
) -> None:
    stack = durable.stack
    durable.hub.set_down(True)
    try:
        run_id = durable.fire()
        detail = durable.sink_writes(
            run_id,
            "failed",
            timeout=60,
            what="the fire's State Hub writes to fail at the end of the window",
        )
    finally:
        durable.hub.set_down(False)
    fire = detail["run"]
    event = fire["triggering_event_id"]
    assert fire["status"] == "emitted"  # its ops runs are queued
    assert "HTTP 503" in fire["sink_writes"]["error"]
    assert len(durable.ops_runs_of(event)) == 3
    page = stack.ui_run(SLUG, run_id)
    assert "Issue sink writes failed" in page
    assert "HTTP 503" in page
    command = f"activity-core retry-fire {SLUG} {run_id}"
    assert command in page

    # the operator runs what the page says
    retried = stack.sup.run(
        "durable-retry-fire",
        [str(console_script("activity-core")), "retry-fire", SLUG, run_id],
        env=stack.config.env(),
        timeout=60,
    )
    assert f"retrying fire {run_id} of {SLUG}" in retried.output
    retry = stack.wait(
        lambda: next((f for f in stack.fires(SLUG) if f["retry_of"] == run_id), None),
        timeout=30,
        what="the retry to be recorded",
    )
    detail = durable.sink_writes(
        retry["run_id"], "written", timeout=30, what="the retry to write the failed tasks"
    )
    assert detail["run"]["triggering_event_id"] == event
    assert detail["run"]["retry_of"] == run_id
    assert len(durable.ops_runs_of(event)) == 3  # nothing queued twice
    durable.assert_each_task_written_once(event)
    page = html.unescape(stack.ui_page(f"/ops/ui/automations/{SLUG}/runs/{run_id}").text)
    assert "Issue sink writes failed" not in page  # the original fire's writes are done too


async def _timeouts(address: str, run_id: str) -> tuple[timedelta, timedelta]:
    client = await Client.connect(address)
    async for execution in client.list_workflows(f'RunId = "{run_id}"'):
        described = await client.get_workflow_handle(execution.id, run_id=run_id).describe()
        config = described.raw_description.execution_config
        return (
            config.workflow_execution_timeout.ToTimedelta(),
            config.workflow_run_timeout.ToTimedelta(),
        )
    raise AssertionError(f"no workflow run {run_id}")


async def _running_scheduled_fires(address: str) -> list[str]:
    client = await Client.connect(address)
    # the scenarios before this one leave nothing running on the deployment's queue
    query = f'TaskQueue = "{TASK_QUEUE}" AND ExecutionStatus = "Running"'
    return [execution.run_id async for execution in client.list_workflows(query)]


@pytest.mark.timeout(120)
def test_a_fire_waits_for_its_stopped_temporal_worker_and_emits_when_it_is_back(
    durable: Deployment,
) -> None:
    stack = durable.stack
    durable.worker.stop()
    stack.trigger_schedule(SLUG)
    [run_id] = stack.wait(
        lambda: asyncio.run(_running_scheduled_fires(stack.temporal_address)),
        timeout=30,
        what="the scheduled fire to wait in Temporal",
    )
    # no execution timeout: nothing would end it while its worker is away
    assert asyncio.run(_timeouts(stack.temporal_address, run_id)) == (timedelta(0), timedelta(0))
    time.sleep(3.0)
    assert durable.fire_row(run_id) is None

    durable.worker.start()
    fire = durable.emitted(run_id, what="the waiting fire to emit once its worker is back")
    assert fire["trigger_key"] == "scheduled"
    assert fire["triggering_event_id"].startswith("scheduled:")
    event = fire["triggering_event_id"]
    assert sorted(r["idempotency_key"] for r in durable.ops_runs_of(event)) == sorted(
        durable.keys_of(event)
    )
