"""Real PostgreSQL for tests and benchmarks: the server, scratch databases on it, and a
migrated template cloned once per test.

The server is TEST_DATABASE_URL when set, else an embedded one (activity-core's `local`
extra). A migrated template is made once per session and each test gets its own clone
(CREATE DATABASE ... TEMPLATE, milliseconds), dropped WITH (FORCE) afterwards, so tests
never share rows and a connection a test leaked cannot keep its database alive.
"""

from __future__ import annotations

import os
import tempfile
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import asyncpg

from activity_core.db.migrate import migrate

__all__ = [
    "SERVER_VARIABLE",
    "create_database",
    "database_name",
    "database_server",
    "drop_database",
    "migrated_template",
    "scratch_database",
    "with_database",
]

SERVER_VARIABLE = "TEST_DATABASE_URL"


def with_database(dsn: str, name: str) -> str:
    """The same server's DSN for another database."""
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def database_name(prefix: str) -> str:
    """A fresh database name: the prefix says who made it, if one is ever left behind."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@contextmanager
def database_server(prefix: str) -> Iterator[str]:
    """The server's DSN: TEST_DATABASE_URL, else an embedded server for as long as this
    lasts (its data directory under a temporary directory named by `prefix`)."""
    url = os.environ.get(SERVER_VARIABLE)
    if url:
        yield url
        return
    from activity_core.db.embedded import start_embedded

    state = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    dsn, handle = start_embedded(state, database="postgres")
    try:
        yield dsn
    finally:
        del handle


async def create_database(server_dsn: str, name: str, *, template: str | None = None) -> str:
    """CREATE DATABASE (from `template` if given); its DSN."""
    admin = await asyncpg.connect(server_dsn, timeout=10)
    try:
        clause = f' TEMPLATE "{template}"' if template else ""
        await admin.execute(f'CREATE DATABASE "{name}"{clause}')
    finally:
        await admin.close()
    return with_database(server_dsn, name)


async def drop_database(server_dsn: str, name: str) -> None:
    admin = await asyncpg.connect(server_dsn, timeout=10)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def scratch_database(
    server_dsn: str, prefix: str, *, template: str | None = None
) -> AsyncIterator[str]:
    """A database of its own (a clone of `template`, or empty) while this lasts: its DSN."""
    name = database_name(prefix)
    dsn = await create_database(server_dsn, name, template=template)
    try:
        yield dsn
    finally:
        await drop_database(server_dsn, name)


@asynccontextmanager
async def migrated_template(server_dsn: str, prefix: str) -> AsyncIterator[str]:
    """A database migrated to this build's schema, to clone: its name."""
    name = database_name(prefix)
    dsn = await create_database(server_dsn, name)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        yield name
    finally:
        await drop_database(server_dsn, name)
