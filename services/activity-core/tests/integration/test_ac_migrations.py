"""The migration chain: idempotent, replica-safe, append-only; and the claim path's plan."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from activity_core.db import migrate as migrate_module
from activity_core.db.migrate import MigrationError, bundled_migrations, current_version, migrate


async def test_replicas_racing_to_migrate_apply_each_migration_once(empty_dsn: str) -> None:
    conns = [await asyncpg.connect(empty_dsn) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in conns))
        applied = sorted(v for r in results for v in r)
        assert applied == [m.version for m in bundled_migrations()]
        assert await current_version(conns[0]) == bundled_migrations()[-1].version
        assert await migrate(conns[0]) == []
    finally:
        for c in conns:
            await c.close()


async def test_a_changed_applied_migration_is_refused(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = await asyncpg.connect(empty_dsn)
    try:
        await migrate(conn)
        original = bundled_migrations()
        edited = [
            migrate_module.Migration(m.version, m.name, m.sql + "\n-- edited") for m in original
        ]
        monkeypatch.setattr(migrate_module, "bundled_migrations", lambda: edited)
        with pytest.raises(MigrationError, match="changed after it was applied"):
            await migrate(conn)
    finally:
        await conn.close()


async def test_a_database_from_a_newer_build_is_refused(empty_dsn: str) -> None:
    conn = await asyncpg.connect(empty_dsn)
    try:
        await migrate(conn)
        await conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'future', 'x')"
        )
        with pytest.raises(MigrationError, match="does not know"):
            await migrate(conn)
    finally:
        await conn.close()


async def _plan(conn: asyncpg.Connection, sql: str, *args: object) -> str:
    rows = await conn.fetch(f"EXPLAIN (FORMAT JSON) {sql}", *args)
    return json.dumps(json.loads(rows[0][0]) if isinstance(rows[0][0], str) else rows[0][0])


async def test_the_claim_uses_the_open_claim_index_on_a_large_table(
    db: asyncpg.Connection,
) -> None:
    from ac_testkit import SeededQueue
    from activity_core.queue import queries

    definition = await SeededQueue(db).definition()
    await db.execute(
        """
        INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title,
                              source_type, source_id, triggering_event_id, state, claim_owner,
                              attempt, created_at)
        SELECT gen_random_uuid(), $1, 'bulk:' || g, 'r/r', 't', 'rule', 'r', 'e:' || g,
               CASE WHEN g % 10 = 0 THEN 'open' ELSE 'succeeded' END,
               CASE WHEN g % 10 = 0 THEN NULL ELSE 'w' END, 1,
               now() - make_interval(secs => g)
        FROM generate_series(1, 50000) AS g
        """,
        definition,
    )
    await db.execute("ANALYZE ops_runs")
    async with db.transaction():
        plan = await _plan(db, queries.CLAIM, "w", 60, 1, "none", [])
        guarded = await _plan(db, queries.CLAIM_UNLESS_STALE, "w", 60, 1, "none", [])
        one = await _plan(db, queries.CLAIM_ONE_UNLESS_STALE, "w", 60, "none", [])
        coalesced = await _plan(
            db, queries.CLAIM_MANY_UNLESS_STALE, ["w1", "w2"], [60, 60], 2, "none", []
        )
        stale = await _plan(db, queries.RECLAIM_STALE, 3)
    assert "ops_runs_open_claim_order" in plan
    assert "Seq Scan" not in plan
    # the stale probe is one lookup of the claimed-lease index evaluated once per
    # statement; no other index holds claimed rows (0004), so it cannot drift to one
    # that keeps an entry per claim ever made
    assert "ops_runs_open_claim_order" in guarded and "ops_runs_claimed_lease" in guarded
    assert '"Subplan Name": "InitPlan' in guarded
    assert "Seq Scan" not in guarded
    assert "ops_runs_open_claim_order" in one and "ops_runs_claimed_lease" in one
    assert '"Subplan Name": "InitPlan' in one
    assert "ops_runs_pkey" in one and "Seq Scan" not in one
    # claims that arrived together: the same index head, probe and stopping scan
    assert "ops_runs_open_claim_order" in coalesced and "ops_runs_claimed_lease" in coalesced
    assert '"Subplan Name": "InitPlan' in coalesced
    assert "Seq Scan" not in coalesced
    assert "ops_runs_claimed_lease" in stale
    assert "Seq Scan" not in stale
    # the operator listing by state reads an index for every state, history included
    for state in ("open", "claimed", "succeeded", "failed", "expired"):
        listing = await _plan(
            db,
            queries.LIST_RUNS_IN_STATE,
            state,
            None,
            None,
            None,
            None,
            None,
            51,
            None,
            None,
            None,
        )
        assert "Seq Scan" not in listing, (state, listing)


async def test_the_common_claim_keeps_one_cached_plan_on_a_large_table(
    db: asyncpg.Connection,
) -> None:
    """CLAIM_UNLESS_STALE is planned once per connection, not once per claim: a statement
    whose scan LIMIT is a parameter never gets a generic plan (the plan cache prices it at
    10% of the open rows), and planning it cost more than running it (0.2 ms). Its generic
    plan reads the same indexes as a custom one and never the whole table."""
    from ac_testkit import SeededQueue
    from activity_core.queue import queries

    definition = await SeededQueue(db).definition()
    await db.execute(
        """
        INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title,
                              source_type, source_id, triggering_event_id, priority, created_at)
        SELECT gen_random_uuid(), $1, 'bulk:' || g, 'r/r', 't', 'rule', 'r', 'e:' || g,
               (ARRAY['low','medium','high'])[1 + g % 3], now() - make_interval(secs => g)
        FROM generate_series(1, 50000) AS g
        """,
        definition,
    )
    await db.execute("ANALYZE ops_runs")
    async with db.transaction():
        await db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        generic = await _plan(db, queries.CLAIM_UNLESS_STALE, "w", 60, 3, "none", [])
    assert "ops_runs_open_claim_order" in generic and "ops_runs_claimed_lease" in generic
    assert "ops_runs_pkey" in generic
    assert "Seq Scan" not in generic, generic

    claim = await db.prepare(queries.CLAIM_UNLESS_STALE)
    taken: list[tuple[int, object, object]] = []
    for n in range(8):
        rows = await claim.fetch(f"w{n}", 60, 2, "none", [])
        assert len(rows) == 2
        taken += [(_rank(r["priority"]), r["created_at"], r["id"]) for r in rows]
    plans = await db.fetchrow(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
        queries.CLAIM_UNLESS_STALE,
    )
    assert plans is not None and plans["generic_plans"] >= 2, dict(plans or {})
    # each claim's rows come back in claim order, and the claims take the queue's head
    assert taken == sorted(taken)

    # the claim of one run: a constant LIMIT, so a generic plan from the start
    async with db.transaction():
        await db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        generic_one = await _plan(db, queries.CLAIM_ONE_UNLESS_STALE, "w", 60, "none", [])
    assert "ops_runs_open_claim_order" in generic_one and "ops_runs_pkey" in generic_one
    assert "Seq Scan" not in generic_one, generic_one
    claim_one = await db.prepare(queries.CLAIM_ONE_UNLESS_STALE)
    for n in range(8):
        [row] = await claim_one.fetch(f"o{n}", 60, "none", [])
        taken.append((_rank(row["priority"]), row["created_at"], row["id"]))
    plans = await db.fetchrow(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
        queries.CLAIM_ONE_UNLESS_STALE,
    )
    assert plans is not None and plans["generic_plans"] >= 2, dict(plans or {})
    assert taken == sorted(taken)


def _rank(priority: str) -> int:
    return {"high": 0, "medium": 1, "low": 2}[priority]
