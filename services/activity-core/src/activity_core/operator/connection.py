"""Connections of the operator plane: driver failures that mean "the database is not
there" become DatabaseUnavailable (503), once, here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..queue.errors import DatabaseUnavailable

__all__ = ["UNAVAILABLE", "connection", "snapshot"]

UNAVAILABLE = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
)


@asynccontextmanager
async def connection(pool: asyncpg.Pool) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    try:
        async with pool.acquire() as conn:
            yield conn
    except UNAVAILABLE as exc:
        raise DatabaseUnavailable(type(exc).__name__) from exc


@asynccontextmanager
async def snapshot(pool: asyncpg.Pool) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    """One read-only REPEATABLE READ transaction: a view's statements see one moment."""
    async with (
        connection(pool) as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        yield conn
