"""The pool's session reset is skipped only for uses that declare they set no session state."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from activity_core.db.pool import EncodedJson, PoolConnection, create_pool, session_untouched
from ops_contracts import canonical_json


@pytest.fixture
async def pool(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """The service's pool with one connection, so each acquire reuses the last one."""
    pool = await create_pool(db_dsn, min_size=1, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


async def _timeout_after_reuse(pool: asyncpg.Pool, *, declare: bool) -> str:
    async with pool.acquire() as conn:
        await conn.execute("SET statement_timeout = '4321ms'")
        if declare:
            session_untouched(conn)
    async with pool.acquire() as conn:
        value: str = await conn.fetchval("SHOW statement_timeout")
    return value


async def test_release_resets_the_session_unless_declared_untouched(pool: asyncpg.Pool) -> None:
    # A SET that survives the release proves the reset round trip was skipped ...
    assert await _timeout_after_reuse(pool, declare=True) == "4321ms"
    # ... once: the declaration does not stick to the connection.
    assert await _timeout_after_reuse(pool, declare=False) == "0"
    assert await _timeout_after_reuse(pool, declare=False) == "0"


async def test_undeclared_use_releases_session_advisory_locks(pool: asyncpg.Pool) -> None:
    # Emission holds a session advisory lock across a sink call; a use that leaks one must
    # not leave it held for the next acquirer.
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock(77, 78)")
    async with pool.acquire() as conn:
        held = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
    assert held == 0


async def test_an_open_transaction_is_rolled_back_even_when_declared_untouched(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        session_untouched(conn)
        tx = conn.transaction()
        await tx.start()
        await conn.execute("CREATE TABLE pool_probe (x int)")
    async with pool.acquire() as conn:
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT to_regclass('pool_probe')") is None


async def test_a_plain_connection_keeps_the_full_reset(db_dsn: str) -> None:
    conn = await asyncpg.connect(db_dsn)
    try:
        session_untouched(conn)  # not a PoolConnection: nothing to declare, no error
        assert "RESET ALL" in conn.get_reset_query()
    finally:
        await conn.close()
    pooled = await asyncpg.connect(db_dsn, connection_class=PoolConnection)
    try:
        session_untouched(pooled)
        assert pooled.get_reset_query() == ""
        assert "RESET ALL" in pooled.get_reset_query()
    finally:
        await pooled.close()


async def test_encoded_json_is_sent_as_it_is_and_any_other_str_is_a_json_string(
    pool: asyncpg.Pool,
) -> None:
    # A close stores the text its digest already encoded (EncodedJson); a plain str is a
    # JSON string value, never JSON text to be parsed.
    async with pool.acquire() as conn:
        text = canonical_json({"b": [1, None], "a": "é"}).decode("utf-8")
        stored = await conn.fetchval("SELECT $1::jsonb", EncodedJson(text))
        assert stored == {"a": "é", "b": [1, None]}
        assert await conn.fetchval("SELECT jsonb_typeof($1::jsonb)", EncodedJson(text)) == (
            "object"
        )
        assert await conn.fetchval("SELECT $1::jsonb", text) == text
        assert await conn.fetchval("SELECT jsonb_typeof($1::jsonb)", text) == "string"
        # arrays of jsonb, as the coalesced close sends them
        many = await conn.fetchval(
            "SELECT array_agg(jsonb_typeof(x)) FROM unnest($1::jsonb[]) AS x",
            [EncodedJson(text), {"c": 1}, None],
        )
        assert many == ["object", "object", None]
