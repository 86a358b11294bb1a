"""A fire whose emission committed but whose completion never reached Temporal, on the real
Temporal dev server and real PostgreSQL: the emit step's retry finds the emission done and
goes on to the sink writes it owes, whatever happened to the automation in between (an
operator's pause), so they are written, never left pending for good.

The lost completion is an emit activity that runs the real one (its transaction commits:
the fire is `emitted`, its write `pending`) and then fails its attempt, as a worker killed
before it reports would: Temporal sees an attempt without a result and retries it. Between
the two, the operator pauses the automation through the real pause (database row and
Temporal Schedule).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from ac_temporal_kit import TemporalHarness, definition, start_worker_harness
from activity_core.temporal.activities import ActivityCoreActivities
from activity_core.temporal.client import TemporalClientProvider
from activity_core.temporal.dev_server import DevServer
from activity_core.temporal.pause import AutomationPauses
from activity_core.temporal.payloads import EmitInput, EmitOutcome, RunActivityResult

FAST = {"ACTIVITY_CORE_FIRE_RETRY_MAX_SECONDS": "1", "ACTIVITY_CORE_SINK_RETRY_MAX_SECONDS": "1"}


class EmitWhoseFirstCompletionIsLost:
    """The worker's emit activity, but its first attempt, once committed, is paused over
    and reports nothing Temporal can use (it fails, as a killed worker's attempt would)."""

    def __init__(self, real: ActivityCoreActivities, pauses: AutomationPauses, slug: str) -> None:
        self._real = real
        self._pauses = pauses
        self._slug = slug
        self.attempts = 0

    @activity.defn(name="emit_activity_run")
    async def emit(self, params: EmitInput) -> EmitOutcome:
        self.attempts += 1
        outcome = await self._real.emit(params)
        if self.attempts == 1:
            await self._pauses.pause(self._slug, operator="operator", reason="vendor outage")
            raise ApplicationError("the attempt's completion was lost", type="LostCompletion")
        return outcome


@asynccontextmanager
async def worker_losing_the_first_emit(
    client: Client, server: DevServer, db_dsn: str
) -> AsyncIterator[tuple[TemporalHarness, EmitWhoseFirstCompletionIsLost]]:
    emits: list[EmitWhoseFirstCompletionIsLost] = []

    def activities_for(harness: TemporalHarness, real: ActivityCoreActivities) -> list[Any]:
        pauses = AutomationPauses(harness.pool, TemporalClientProvider(harness.settings))
        emits.append(EmitWhoseFirstCompletionIsLost(real, pauses, harness.slug))
        others = [a for a in real.all() if a != real.emit]
        assert len(others) == len(real.all()) - 1
        return [*others, emits[0].emit]

    harness, worker = await start_worker_harness(
        client, db_dsn, activities_for, TEMPORAL_ADDRESS=server.address, **FAST
    )
    try:
        async with worker:
            yield harness, emits[0]
    finally:
        await harness.pool.close()


async def test_an_emission_whose_completion_was_lost_publishes_its_writes_though_paused_since(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str
) -> None:
    async with worker_losing_the_first_emit(temporal_client, temporal_server, db_dsn) as (
        temporal,
        emit,
    ):
        # a schedule (never due in the test), so that the automation can be paused
        await temporal.sync(definition(temporal.slug, cron="0 6 1 1 *"))
        fired = await temporal.fire_manual({"correlation_id": "c-1"})
        handle = temporal.client.get_workflow_handle(
            fired.workflow_id, run_id=fired.run_id, result_type=RunActivityResult
        )
        result = await asyncio.wait_for(handle.result(), timeout=60)

        assert emit.attempts == 2  # the lost one, and the retry that found it done
        assert await temporal.pool.fetchval(
            "SELECT paused FROM activity_definitions WHERE slug = $1", temporal.slug
        )
        assert (result.emitted_count, result.sink_written, result.sink_failed) == (1, 1, 0)
        [fire] = await temporal.activity_runs()
        assert (fire["status"], fire["emitted_count"], fire["error"]) == ("emitted", 1, None)
        [ops] = await temporal.ops_runs()
        [audit] = await temporal.pool.fetch("SELECT * FROM task_spawn_log")
        assert (audit["outcome"], audit["sink_status"]) == ("created", "written")
        [published] = temporal.sink.published
        assert (published.idempotency_key, published.ops_run_id) == (
            ops["idempotency_key"],
            ops["id"],
        )
