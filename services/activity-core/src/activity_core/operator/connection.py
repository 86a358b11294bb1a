"""Connections of the operator plane: a lost database becomes DatabaseUnavailable (503)
by the one mapping in db/unavailable.py. An operator action is never run again here (it
may have committed); its Idempotency-Key, or the action's own state check, answers the
operator's retry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.db.unavailable import pooled

__all__ = ["connection", "snapshot"]


@asynccontextmanager
async def connection(pool: asyncpg.Pool) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    async with pooled(pool) as conn:
        yield conn


@asynccontextmanager
async def snapshot(pool: asyncpg.Pool) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    """One read-only REPEATABLE READ transaction: a view's statements see one moment."""
    async with (
        connection(pool) as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        yield conn
