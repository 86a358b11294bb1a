"""The asyncpg pool, with JSON codecs so jsonb columns round-trip as Python values."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from ops_contracts import canonical_json


def _encode_json(value: Any) -> str:
    # canonical_json refuses NaN/Infinity, so nothing non-finite ever reaches a jsonb column
    return canonical_json(value).decode("utf-8")


async def init_connection(conn: asyncpg.Connection) -> None:
    for kind in ("json", "jsonb"):
        await conn.set_type_codec(
            kind, encoder=_encode_json, decoder=json.loads, schema="pg_catalog"
        )


async def create_pool(dsn: str, *, min_size: int, max_size: int) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=init_connection,
        # claims and closes are short; a statement that hangs longer is a fault, not work
        command_timeout=30,
    )
    assert pool is not None
    return pool
