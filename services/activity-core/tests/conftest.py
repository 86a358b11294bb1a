"""Real PostgreSQL for every test: TEST_DATABASE_URL when set, else the embedded server.

A template database is migrated once per session; each test gets its own database cloned
from it (CREATE DATABASE ... TEMPLATE) and dropped afterwards, so tests never share rows.
"""

from __future__ import annotations

import os
import tempfile
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ac_testkit import (
    AppClient,
    SeededQueue,
    start_app,
)
from activity_core.db.migrate import migrate
from activity_core.db.pool import create_pool, init_connection


def _with_database(dsn: str, name: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        yield url
        return
    from activity_core.db.embedded import start_embedded

    state = Path(tempfile.mkdtemp(prefix="activity-core-test-"))
    dsn, handle = start_embedded(state, database="postgres")
    yield dsn
    del handle


@pytest.fixture(scope="session")
async def template_name(server_dsn: str) -> AsyncIterator[str]:
    name = f"ac_template_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        conn = await asyncpg.connect(_with_database(server_dsn, name))
        try:
            await migrate(conn)
        finally:
            await conn.close()
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@asynccontextmanager
async def _migrated_database(server_dsn: str, template_name: str) -> AsyncIterator[str]:
    name = f"ac_test_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')
        yield _with_database(server_dsn, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def db_dsn(server_dsn: str, template_name: str) -> AsyncIterator[str]:
    async with _migrated_database(server_dsn, template_name) as dsn:
        yield dsn


@pytest.fixture
async def twin_db_dsn(server_dsn: str, template_name: str) -> AsyncIterator[str]:
    """A second migrated database beside db_dsn (tests that compare two instances)."""
    async with _migrated_database(server_dsn, template_name) as dsn:
        yield dsn


@pytest.fixture
async def empty_dsn(server_dsn: str) -> AsyncIterator[str]:
    """A database with nothing in it, not even the schema (migration and readiness tests)."""
    name = f"ac_empty_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield _with_database(server_dsn, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def db(db_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(db_dsn)
    await init_connection(conn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def pool(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """The service's pool (its JSON codecs) on the test database; room for the
    concurrency tests' parallel emissions."""
    pool = await create_pool(db_dsn, min_size=1, max_size=12)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def seeded(db: asyncpg.Connection) -> SeededQueue:
    return SeededQueue(db)


@pytest.fixture
async def api(db_dsn: str) -> AsyncIterator[AppClient]:
    client, lifespan = await start_app(db_dsn)
    try:
        yield client
    finally:
        await client.http.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def app_factory(db_dsn: str) -> AsyncIterator[Any]:
    """Start more app instances (other settings, or a second replica) on the test database."""
    started: list[tuple[AppClient, Any]] = []

    async def factory(**env: Any) -> AppClient:
        pair = await start_app(db_dsn, **env)
        started.append(pair)
        return pair[0]

    try:
        yield factory
    finally:
        for client, lifespan in started:
            await client.http.aclose()
            await lifespan.__aexit__(None, None, None)
