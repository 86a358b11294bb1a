"""The pytest plugin (entry point `pytest11`): real PostgreSQL fixtures for every tree of
tests.

- `server_dsn` (session): TEST_DATABASE_URL, else an embedded server;
- `template_name` (session): a database migrated once per session;
- `db_dsn`, `twin_db_dsn`: a clone of the template per test (the twin for tests that
  compare two instances);
- `empty_dsn`: a database with nothing in it, not even the schema;
- `db`: a connection to `db_dsn` with the service's JSON codecs;
- `pool`: the service's pool on `db_dsn`, with room for concurrent emissions;
- `git_server`: a real git smart-HTTP server on 127.0.0.1 (`ops_testsupport.git_server`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from activity_core.db.pool import create_pool, init_connection
from ops_testsupport.databases import database_server, migrated_template, scratch_database
from ops_testsupport.git_server import git_server

__all__ = [
    "db",
    "db_dsn",
    "empty_dsn",
    "git_server",
    "pool",
    "server_dsn",
    "template_name",
    "twin_db_dsn",
]


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    with database_server("ops-test") as dsn:
        yield dsn


@pytest.fixture(scope="session")
async def template_name(server_dsn: str) -> AsyncIterator[str]:
    async with migrated_template(server_dsn, "test_template") as name:
        yield name


@pytest.fixture
async def db_dsn(server_dsn: str, template_name: str) -> AsyncIterator[str]:
    async with scratch_database(server_dsn, "test", template=template_name) as dsn:
        yield dsn


@pytest.fixture
async def twin_db_dsn(server_dsn: str, template_name: str) -> AsyncIterator[str]:
    """A second migrated database beside db_dsn (tests that compare two instances)."""
    async with scratch_database(server_dsn, "test", template=template_name) as dsn:
        yield dsn


@pytest.fixture
async def empty_dsn(server_dsn: str) -> AsyncIterator[str]:
    """A database with nothing in it, not even the schema (migration and readiness tests)."""
    async with scratch_database(server_dsn, "test_empty") as dsn:
        yield dsn


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
