"""The database, read from the test's side: asyncpg on a private event loop thread, so
the synchronous tests never touch pytest-asyncio's loops; and where a deployment's
database comes from (`own_database`)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from ops_demo.postgres import EmbeddedPostgres
from ops_testsupport import databases
from ops_testsupport.databases import create_database, database_name, with_database

__all__ = ["Db", "drop_database", "fresh_database", "own_database", "with_database"]

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Db:
    """One connection per call: a database restart between two calls is no problem."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._loop = _Loop()

    def close(self) -> None:
        self._loop.close()

    async def _call(self, method: str, query: str, *args: Any) -> Any:
        conn = await asyncpg.connect(self.dsn, timeout=10)
        try:
            return await getattr(conn, method)(query, *args)
        finally:
            await conn.close()

    def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = self._loop.run(self._call("fetch", query, *args))
        return rows

    def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        row: asyncpg.Record | None = self._loop.run(self._call("fetchrow", query, *args))
        return row

    def fetchval(self, query: str, *args: Any) -> Any:
        return self._loop.run(self._call("fetchval", query, *args))

    def execute(self, query: str, *args: Any) -> str:
        status: str = self._loop.run(self._call("execute", query, *args))
        return status


def fresh_database(server_dsn: str, prefix: str = "e2e") -> tuple[str, str]:
    """CREATE DATABASE on the server; (its name, its DSN)."""
    name = database_name(prefix)
    loop = _Loop()
    try:
        dsn = loop.run(create_database(server_dsn, name))
    finally:
        loop.close()
    return name, dsn


def drop_database(server_dsn: str, name: str) -> None:
    loop = _Loop()
    try:
        loop.run(databases.drop_database(server_dsn, name))
    finally:
        loop.close()


@contextmanager
def own_database(root: Path, name: str) -> Iterator[str]:
    """A fresh database for one deployment, as its DSN: on TEST_DATABASE_URL's server
    (`name` its prefix; dropped at the end), else on an embedded server of its own under
    `root / "postgres"` (`name` the database; stopped at the end)."""
    server = os.environ.get("TEST_DATABASE_URL")
    if server:
        database, dsn = fresh_database(server, prefix=name)
        try:
            yield dsn
        finally:
            drop_database(server, database)
        return
    embedded = EmbeddedPostgres(root / "postgres", database=name)
    try:
        yield embedded.start()
    finally:
        embedded.close()
