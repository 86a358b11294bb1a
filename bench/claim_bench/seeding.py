"""The scratch database's contents: migrated schema, seeded runs, resets and the checks."""

from __future__ import annotations

import asyncio
import secrets
import time
import urllib.parse
from datetime import UTC, datetime, timedelta

import asyncpg

from activity_core.db.migrate import migrate
from activity_core.db.pool import init_connection
from claim_bench.plan import DEFINITION_ID
from claim_bench.records import PhaseLog
from claim_bench.sql import (
    CHECK_RUNS,
    MINIMAL_SCHEMA,
    SEED_DEFINITION,
    SEED_MINIMAL,
    SEED_RUNS,
    TABLE_STATS,
)

__all__ = ["Database", "connect"]


async def connect(dsn: str) -> asyncpg.Connection:
    """A connection set up as the service's pool sets up its own."""
    conn = await asyncpg.connect(dsn, timeout=10)
    await init_connection(conn)
    return conn


class Database:
    """The scratch database: one admin connection for seeding, resets and checks."""

    def __init__(self, dsn: str, conn: asyncpg.Connection) -> None:
        self.dsn = dsn
        self.conn = conn
        self.name = urllib.parse.urlsplit(dsn).path.lstrip("/")
        self._seeded = 0

    @classmethod
    async def prepare(cls, dsn: str) -> Database:
        conn = await asyncpg.connect(dsn, timeout=10)
        await init_connection(conn)
        await migrate(conn)
        await conn.execute(SEED_DEFINITION, DEFINITION_ID)
        await conn.execute(MINIMAL_SCHEMA)
        return cls(dsn, conn)

    async def close(self) -> None:
        await self.conn.close()

    async def reset(self, rows: int, *, chunk: int) -> None:
        """Empty ops_runs and seed `rows` open runs, then VACUUM ANALYZE (a fresh table)."""
        # every table that references ops_runs goes too (TRUNCATE refuses otherwise)
        await self.conn.execute(
            "TRUNCATE ops_runs, ops_run_keys, task_spawn_log, ops_run_changes, ops_run_publications"
        )
        self._seeded = 0
        await self.add_runs(rows, chunk=chunk)

    async def add_runs(self, rows: int, *, chunk: int) -> None:
        started = time.perf_counter()
        base = datetime.now(UTC) - timedelta(days=30)
        tag = secrets.token_hex(4)
        first = self._seeded + 1
        last = self._seeded + rows
        for lo in range(first, last + 1, chunk):
            hi = min(lo + chunk - 1, last)
            await self.conn.execute(SEED_RUNS, DEFINITION_ID, tag, lo, base, hi)
        self._seeded = last
        await self.conn.execute("VACUUM ANALYZE ops_runs, ops_run_keys")
        took = time.perf_counter() - started
        print(f"  · seeded {rows:,} open runs ({self._seeded:,} in all) in {took:.1f} s")

    async def reset_minimal(self, rows: int) -> None:
        await self.conn.execute("TRUNCATE bench_minimal_queue")
        await self.conn.execute(SEED_MINIMAL, datetime.now(UTC) - timedelta(days=30), rows)
        await self.conn.execute("VACUUM ANALYZE bench_minimal_queue")

    async def check_runs(self, log: PhaseLog) -> None:
        """No run claimed twice, none left claimed, every completion stored."""
        row = await self.conn.fetchrow(CHECK_RUNS)
        assert row is not None
        if row["reclaimed"]:
            log.double_claims += int(row["reclaimed"])
            log.errors.append(f"{row['reclaimed']} rows were claimed more than once (attempt > 1)")
        if row["still_claimed"]:
            log.errors.append(f"{row['still_claimed']} rows are still claimed after the phase")
        if int(row["succeeded"]) != len(log.runs_done):
            log.errors.append(
                f"{row['succeeded']} rows succeeded but workers completed {len(log.runs_done)}"
            )

    async def table_stats(self) -> asyncpg.Record:
        # Statistics reach the shared view when a backend goes idle; give them a moment.
        await asyncio.sleep(1.2)
        await self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await self.conn.fetchrow(TABLE_STATS)
        assert row is not None
        return row
