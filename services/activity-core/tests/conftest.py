"""Fixtures of the activity-core tests. The databases (server_dsn, template_name, db_dsn,
twin_db_dsn, empty_dsn, db, pool) come from the ops_testsupport pytest plugin: a template
migrated once per session, one clone per test."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from ac_testkit import AppClient, SeededQueue, running_app


@pytest.fixture
def seeded(db: asyncpg.Connection) -> SeededQueue:
    return SeededQueue(db)


@pytest.fixture
async def api(db_dsn: str) -> AsyncIterator[AppClient]:
    async with running_app(db_dsn) as client:
        yield client


@pytest.fixture
async def app_factory(db_dsn: str) -> AsyncIterator[Any]:
    """Start more app instances (other settings, or a second replica) on the test database."""
    async with contextlib.AsyncExitStack() as started:

        async def factory(**env: Any) -> AppClient:
            return await started.enter_async_context(running_app(db_dsn, **env))

        yield factory
