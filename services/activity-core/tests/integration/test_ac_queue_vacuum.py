"""The queue table's own VACUUM (queue/vacuum.py), on a real server.

The machine's PostgreSQL runs with autovacuum off and the embedded one with it on; these
tests hold either way: nothing here waits for autovacuum, and each test's database is new.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
import uuid
from typing import Any

import asyncpg
import pytest

from ac_testkit import SeededQueue, running_app
from activity_core.db.pool import create_pool
from activity_core.queue import queries
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.vacuum import (
    VACUUM_APPLICATION_NAME,
    CheckOutcome,
    QueueVacuum,
)

LIMIT = 1_000


async def seed_open_runs(db: asyncpg.Connection, seeded: SeededQueue, n: int) -> None:
    definition_id = await seeded.definition()
    await db.execute(
        """INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo,
                                 title, description, labels, priority, source_type, source_id,
                                 triggering_event_id, created_at, updated_at)
           SELECT gen_random_uuid(), $1, 'vacuum-test:' || g, 'research/briefs', 'run ' || g,
                  'seeded', '["automated"]'::jsonb, 'medium', 'rule', 'rule-1',
                  'scheduled:' || g, now() - interval '1 day' + g * interval '1 ms', now()
           FROM generate_series(1, $2) AS g""",
        definition_id,
        n,
    )


async def claim_head(db: asyncpg.Connection, n: int) -> None:
    """Claim the n first runs in claim order with the service's own statement: each leaves
    a dead entry at the head of the open-claim index and a dead row version."""
    rows = await db.fetch(queries.CLAIM, "vacuum-test@w1", 900, n, "none", [])
    assert len(rows) == n


async def flush_stats(db: asyncpg.Connection) -> None:
    # Backends report their counts about once a second; a test makes it now (PG 15+).
    await db.execute("SELECT pg_stat_force_next_flush()")
    await db.execute("SELECT 1")


async def churn(db: asyncpg.Connection, seeded: SeededQueue, *, runs: int, claimed: int) -> None:
    """Seed `runs` open runs, claim the first `claimed`, and have their dead rows counted."""
    await seed_open_runs(db, seeded, runs)
    await claim_head(db, claimed)
    await flush_stats(db)


async def table_stats(db: asyncpg.Connection) -> asyncpg.Record:
    row = await db.fetchrow(
        "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relname = 'ops_runs'"
    )
    assert row is not None
    return row


async def claim_buffers(db: asyncpg.Connection) -> int:
    """Buffers one claim of the next open run touches (rolled back: the table stays)."""
    tr = db.transaction()
    await tr.start()
    try:
        raw = await db.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries.CLAIM_UNLESS_STALE,
            "vacuum-test@explain",
            900,
            1,
            "none",
            [],
        )
    finally:
        await tr.rollback()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def as_role(dsn: str, role: str) -> str:
    """The same database as another user (both test servers trust local connections)."""
    parts = urllib.parse.urlsplit(dsn)
    netloc = f"{role}@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def vacuum_for(pool: asyncpg.Pool, dsn: str, **kwargs: Any) -> tuple[QueueVacuum, QueueMetrics]:
    metrics = QueueMetrics()
    options: dict[str, Any] = {"dead_rows_limit": LIMIT, **kwargs}
    return QueueVacuum(pool, dsn, metrics=metrics, **options), metrics


def sample(metrics: QueueMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_below_the_limit_nothing_is_vacuumed(
    db: asyncpg.Connection, seeded: SeededQueue, pool: asyncpg.Pool, db_dsn: str
) -> None:
    await churn(db, seeded, runs=200, claimed=50)
    vacuum, metrics = vacuum_for(pool, db_dsn)

    assert await vacuum.check() is CheckOutcome.BELOW_LIMIT

    stats = await table_stats(db)
    assert stats["vacuum_count"] == 0
    assert stats["n_dead_tup"] == 50
    assert sample(metrics, "ops_runs_dead_rows") == 50


async def test_past_the_limit_a_vacuum_empties_the_head_of_the_claim_index(
    db: asyncpg.Connection, seeded: SeededQueue, pool: asyncpg.Pool, db_dsn: str
) -> None:
    await seed_open_runs(db, seeded, 20_000)
    await db.execute("VACUUM ANALYZE ops_runs")
    fresh = await claim_buffers(db)
    vacuums_before = (await table_stats(db))["vacuum_count"]
    await claim_head(db, 8_000)
    await flush_stats(db)
    bloated = await claim_buffers(db)
    # The premise: the claimed runs' entries still sit where every claim's scan starts.
    assert bloated >= fresh + 20, (fresh, bloated)
    vacuum, metrics = vacuum_for(pool, db_dsn)

    assert await vacuum.check() is CheckOutcome.VACUUMED

    stats = await table_stats(db)
    assert stats["vacuum_count"] == vacuums_before + 1
    assert stats["n_dead_tup"] < LIMIT
    cleaned = await claim_buffers(db)
    assert cleaned <= fresh + 5, (fresh, bloated, cleaned)
    assert sample(metrics, "ops_runs_vacuums_total", outcome="vacuumed") == 1
    assert sample(metrics, "ops_runs_dead_rows") == stats["n_dead_tup"]
    # Below the limit again: the next look leaves the table alone.
    assert await vacuum.check() is CheckOutcome.BELOW_LIMIT
    assert (await table_stats(db))["vacuum_count"] == vacuums_before + 1
    print(f"claim buffers: fresh {fresh}, after 8,000 claims {bloated}, vacuumed {cleaned}")


async def test_an_older_open_transaction_holds_the_dead_rows_and_says_so(
    db: asyncpg.Connection,
    seeded: SeededQueue,
    pool: asyncpg.Pool,
    db_dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await seed_open_runs(db, seeded, 3_000)
    reader = await asyncpg.connect(db_dsn)
    try:
        # A snapshot older than the claims: VACUUM may not remove what it can still see.
        snapshot = reader.transaction(isolation="repeatable_read")
        await snapshot.start()
        await reader.fetchval("SELECT count(*) FROM ops_runs")
        await claim_head(db, 2_000)
        await flush_stats(db)
        vacuum, metrics = vacuum_for(pool, db_dsn)

        with caplog.at_level(logging.WARNING, logger="activity_core.vacuum"):
            assert await vacuum.check() is CheckOutcome.HELD

        assert (await table_stats(db))["n_dead_tup"] >= 2_000
        assert sample(metrics, "ops_runs_vacuums_total", outcome="held") == 1
        assert any("older open transaction" in r.getMessage() for r in caplog.records)
        await snapshot.rollback()
    finally:
        await reader.close()
    # The transaction ended: the next VACUUM removes them.
    assert await vacuum.check() is CheckOutcome.VACUUMED
    assert (await table_stats(db))["n_dead_tup"] < LIMIT


async def test_a_vacuum_already_running_is_left_to_finish_never_waited_for(
    db: asyncpg.Connection, seeded: SeededQueue, pool: asyncpg.Pool, db_dsn: str
) -> None:
    await churn(db, seeded, runs=3_000, claimed=2_000)
    holder = await asyncpg.connect(db_dsn)
    try:
        # The lock a running VACUUM (autovacuum's or another replica's) holds on the table.
        async with holder.transaction():
            await holder.execute("LOCK TABLE ops_runs IN SHARE UPDATE EXCLUSIVE MODE")
            vacuum, metrics = vacuum_for(pool, db_dsn)
            outcome = await asyncio.wait_for(vacuum.check(), 10)
    finally:
        await holder.close()

    assert outcome is CheckOutcome.BUSY
    assert (await table_stats(db))["vacuum_count"] == 0
    assert sample(metrics, "ops_runs_vacuums_total", outcome="busy") == 1


async def test_a_role_that_may_not_vacuum_the_table_stops_looking_and_says_why(
    db: asyncpg.Connection,
    seeded: SeededQueue,
    db_dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await churn(db, seeded, runs=3_000, claimed=2_000)
    role = f"ac_vacuum_{uuid.uuid4().hex[:10]}"
    await db.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        await db.execute(f'GRANT SELECT ON ops_runs TO "{role}"')
        user_dsn = as_role(db_dsn, role)
        role_pool = await create_pool(user_dsn, min_size=1, max_size=1)
        try:
            assert await role_pool.fetchval("SELECT current_user") == role
            vacuum, _ = vacuum_for(role_pool, user_dsn)
            with caplog.at_level(logging.WARNING, logger="activity_core.vacuum"):
                assert await vacuum.check() is CheckOutcome.NOT_PERMITTED
        finally:
            await role_pool.close()
    finally:
        await db.execute(f'DROP OWNED BY "{role}"')
        await db.execute(f'DROP ROLE "{role}"')

    assert (await table_stats(db))["vacuum_count"] == 0
    assert any("may not VACUUM ops_runs" in r.getMessage() for r in caplog.records)


async def test_an_unmigrated_database_is_not_ready_and_nothing_breaks(empty_dsn: str) -> None:
    empty_pool = await create_pool(empty_dsn, min_size=1, max_size=1)
    try:
        vacuum, _ = vacuum_for(empty_pool, empty_dsn)
        assert await vacuum.check() is CheckOutcome.NOT_READY
    finally:
        await empty_pool.close()


async def test_a_limit_of_zero_leaves_the_table_to_autovacuum(
    db: asyncpg.Connection, seeded: SeededQueue, pool: asyncpg.Pool, db_dsn: str
) -> None:
    await churn(db, seeded, runs=3_000, claimed=2_000)
    vacuum, _ = vacuum_for(pool, db_dsn, dead_rows_limit=0)

    assert await vacuum.check() is CheckOutcome.OFF
    assert (await table_stats(db))["vacuum_count"] == 0


async def test_the_running_loop_vacuums_once_the_limit_is_passed(
    db: asyncpg.Connection, seeded: SeededQueue, pool: asyncpg.Pool, db_dsn: str
) -> None:
    await seed_open_runs(db, seeded, 3_000)
    vacuum, _ = vacuum_for(pool, db_dsn, check_every=0.05)
    vacuum.start()
    try:
        await asyncio.sleep(0.2)
        assert (await table_stats(db))["vacuum_count"] == 0
        await claim_head(db, 2_000)
        await flush_stats(db)
        for _ in range(200):
            if (await table_stats(db))["vacuum_count"] >= 1:
                break
            await asyncio.sleep(0.05)
        assert (await table_stats(db))["vacuum_count"] >= 1
    finally:
        await vacuum.stop()
    # Its connection is its own, named for operators, and closed when it is done.
    names = await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
        VACUUM_APPLICATION_NAME,
    )
    assert names == 0


async def test_the_app_runs_the_loop_with_its_setting_and_reports_dead_rows(
    db: asyncpg.Connection, seeded: SeededQueue, db_dsn: str
) -> None:
    await churn(db, seeded, runs=200, claimed=30)
    async with running_app(db_dsn, ACTIVITY_CORE_QUEUE_VACUUM_DEAD_ROWS=50_000) as client:
        response = None
        for _ in range(100):
            response = await client.http.get("/metrics")
            if "ops_runs_dead_rows 30.0" in response.text:
                break
            await asyncio.sleep(0.05)
        assert response is not None
        assert "ops_runs_dead_rows 30.0" in response.text


async def test_a_fault_in_a_check_is_logged_and_the_loop_goes_on(
    pool: asyncpg.Pool, db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    vacuum, _ = vacuum_for(pool, db_dsn, check_every=0.01, backoff_max=0.02)
    calls = 0
    real_check = vacuum.check

    async def faulty_then_real() -> CheckOutcome:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug in a check")
        return await real_check()

    vacuum.check = faulty_then_real  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="activity_core.vacuum"):
        vacuum.start()
        try:
            for _ in range(200):
                if calls >= 3:
                    break
                await asyncio.sleep(0.01)
        finally:
            await vacuum.stop()
    assert calls >= 3
    assert [r.getMessage() for r in caplog.records] == ["vacuum check failed"]
