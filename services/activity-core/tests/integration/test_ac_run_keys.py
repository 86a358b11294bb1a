"""0009: a run's fixed columns are indexed in ops_run_keys and checked by the insert
trigger, and never change, so a claim and a close pay only for the queue columns
(db/migrations/0009_fixed_run_columns.sql)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from ac_testkit import SeededQueue
from activity_core.db.migrate import migrate
from activity_core.db.pool import init_connection
from activity_core.emission import queries as emission_queries

KEY_COLUMNS = (
    "id, idempotency_key, activity_definition_id, target_repo, triggering_event_id, created_at"
)


async def _keys(conn: asyncpg.Connection) -> set[tuple[object, ...]]:
    return {tuple(r) for r in await conn.fetch(f"SELECT {KEY_COLUMNS} FROM ops_run_keys")}


async def _run_keys(conn: asyncpg.Connection) -> set[tuple[object, ...]]:
    return {tuple(r) for r in await conn.fetch(f"SELECT {KEY_COLUMNS} FROM ops_runs")}


async def test_the_migration_copies_the_keys_of_the_runs_there_are(empty_dsn: str) -> None:
    conn = await asyncpg.connect(empty_dsn)
    await init_connection(conn)
    try:
        await migrate(conn, up_to=8)  # as the build before 0009 left it
        seeded = SeededQueue(conn)
        await seeded.runs(3)
        await seeded.run(target_repo="other/repo", triggering_event_id="manual:x")
        before = await _run_keys(conn)
        assert 9 in await migrate(conn)
        assert len(before) == 4
        assert await _keys(conn) == before
        # and a run inserted afterwards gets its key row from the trigger
        await seeded.run()
        assert await _keys(conn) == await _run_keys(conn)
    finally:
        await conn.close()


async def _emit(conn: asyncpg.Connection, key: str) -> uuid.UUID | None:
    definition = await SeededQueue(conn).definition()
    value: uuid.UUID | None = await conn.fetchval(
        emission_queries.INSERT_OPS_RUN,
        uuid.uuid4(),
        definition,
        key,
        "research/briefs",
        "title",
        "",
        ["automated"],
        "medium",
        "rule",
        "rule-1",
        "scheduled:x",
        None,
        None,
        {},
        None,
    )
    return value


async def test_a_run_whose_key_exists_is_skipped_and_answers_no_row(
    db: asyncpg.Connection,
) -> None:
    first = await _emit(db, "k:1")
    assert first is not None
    assert await _emit(db, "k:1") is None
    assert await db.fetchval("SELECT count(*) FROM ops_runs WHERE idempotency_key = 'k:1'") == 1
    assert await db.fetchval(emission_queries.RUN_BY_KEY, "k:1") == first
    assert await _keys(db) == await _run_keys(db)


@pytest.mark.parametrize("first_commits", [True, False], ids=["commits", "aborts"])
async def test_a_concurrent_insert_of_the_same_key_waits_for_the_first(
    db_dsn: str, first_commits: bool
) -> None:
    """As the unique index of ops_runs did: the second insert waits for the first
    transaction; it inserts nothing if that commits, and its own run if that aborts."""
    first = await asyncpg.connect(db_dsn)
    second = await asyncpg.connect(db_dsn)
    try:
        for conn in (first, second):
            await init_connection(conn)
        await SeededQueue(first).definition()
        tx = first.transaction()
        await tx.start()
        mine = await _emit(first, "k:race")
        assert mine is not None
        racing = asyncio.create_task(_emit(second, "k:race"))
        await asyncio.sleep(0.3)
        assert not racing.done(), "the second insert must wait for the first transaction"
        if first_commits:
            await tx.commit()
            assert await racing is None
        else:
            await tx.rollback()
            assert await racing is not None
        assert (
            await first.fetchval("SELECT count(*) FROM ops_runs WHERE idempotency_key = 'k:race'")
            == 1
        )
        assert await _keys(first) == await _run_keys(first)
    finally:
        await first.close()
        await second.close()


@pytest.mark.parametrize(
    "assignment",
    [
        "target_repo = 'elsewhere/repo'",
        "idempotency_key = 'another'",
        "activity_definition_id = gen_random_uuid()",
        "triggering_event_id = 'manual:other'",
        "created_at = created_at - interval '1 day'",
        "id = gen_random_uuid()",
        "labels = '[\"other\"]'::jsonb",
        "priority = 'high'",
        "priority_rank = 0",
        "source_type = 'instruction'",
        "execution_refs = '{\"a\": 1}'::jsonb",
        "repository_grant = '{}'::jsonb",
    ],
)
async def test_the_identifying_columns_never_change(
    db: asyncpg.Connection, assignment: str
) -> None:
    run = await SeededQueue(db).run()
    before = await _run_keys(db)
    with pytest.raises(asyncpg.CheckViolationError, match="inserted with never change"):
        await db.execute(f"UPDATE ops_runs SET {assignment} WHERE id = $1", run)
    assert await _run_keys(db) == before == await _keys(db)
    # naming a column without changing it is no change
    await db.execute("UPDATE ops_runs SET target_repo = target_repo WHERE id = $1", run)


RANKS = {"high": 0, "medium": 1, "low": 2}


async def test_the_migration_keeps_the_ranks_there_are_and_the_trigger_ranks_new_runs(
    empty_dsn: str,
) -> None:
    # priority_rank is no longer a generated column (PostgreSQL computed it again on every
    # claim and close); the insert trigger sets it from the priority.
    conn = await asyncpg.connect(empty_dsn)
    await init_connection(conn)
    try:
        await migrate(conn, up_to=8)  # as the build before 0009 left it
        seeded = SeededQueue(conn)
        before = {await seeded.run(priority=p): RANKS[p] for p in RANKS}
        assert 9 in await migrate(conn)
        ranks = "SELECT id, priority_rank FROM ops_runs"
        assert {r["id"]: r["priority_rank"] for r in await conn.fetch(ranks)} == before
        assert await conn.fetchval(
            "SELECT attgenerated = '' AND attnotnull FROM pg_attribute "
            "WHERE attrelid = 'ops_runs'::regclass AND attname = 'priority_rank'"
        )
        after = {await seeded.run(priority=p): RANKS[p] for p in RANKS}
        assert {r["id"]: r["priority_rank"] for r in await conn.fetch(ranks)} == before | after
    finally:
        await conn.close()


async def test_an_insert_cannot_choose_its_rank(db: asyncpg.Connection) -> None:
    run = await SeededQueue(db).run(priority="low")
    copy = uuid.uuid4()
    await db.execute(
        "INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title, "
        "labels, priority, priority_rank, source_type, source_id, triggering_event_id) "
        "SELECT $1, activity_definition_id, 'k:forged-rank', target_repo, title, labels, "
        "'low', 0, source_type, source_id, triggering_event_id FROM ops_runs WHERE id = $2",
        copy,
        run,
    )
    assert await db.fetchval("SELECT priority_rank FROM ops_runs WHERE id = $1", copy) == 2


async def test_no_run_exists_without_its_key_row(db: asyncpg.Connection) -> None:
    run = await SeededQueue(db).run()
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await db.execute("DELETE FROM ops_run_keys WHERE id = $1", run)


async def test_a_claim_and_a_close_write_only_the_queue_indexes(db: asyncpg.Connection) -> None:
    """No update of ops_runs is HOT (`state` is in every queue index's predicate), so each
    claim and close writes an entry into every index whose predicate holds for the new row
    version: an index added here costs every claim and every close. The listing and key
    indexes belong on ops_run_keys, which is never updated."""
    rows = await db.fetch(
        "SELECT indexrelid::regclass::text AS name, indpred IS NOT NULL AS partial "
        "FROM pg_index WHERE indrelid = 'ops_runs'::regclass ORDER BY 1"
    )
    assert {(r["name"], r["partial"]) for r in rows} == {
        ("ops_runs_pkey", False),
        ("ops_runs_open_claim_order", True),
        ("ops_runs_open_labels", True),
        ("ops_runs_claimed_lease", True),
        ("ops_runs_by_terminal_state", True),
        ("ops_runs_by_requeued_from", True),
    }
    keys = await db.fetch(
        "SELECT indexrelid::regclass::text AS name FROM pg_index "
        "WHERE indrelid = 'ops_run_keys'::regclass"
    )
    assert {r["name"] for r in keys} == {
        "ops_run_keys_pkey",
        "ops_run_keys_idempotency_key_key",
        "ops_run_keys_listing",
        "ops_run_keys_by_definition",
        "ops_run_keys_by_target_repo",
        "ops_run_keys_by_trigger",
    }


@pytest.mark.parametrize(
    "column",
    [
        {"labels": {"not": "a list"}},
        {"priority": "urgent"},
        {"source_type": "cron"},
        {"execution_refs": ["not", "an", "object"]},
        {"repository_grant": ["not", "an", "object"]},
    ],
    ids=lambda c: next(iter(c)),
)
async def test_the_insert_checks_the_fixed_columns(
    db: asyncpg.Connection, column: dict[str, Any]
) -> None:
    """What 0001's CHECK constraints refused, the insert trigger refuses, with their SQLSTATE,
    and neither the run nor its key row is written."""
    with pytest.raises(asyncpg.CheckViolationError, match="an ops run needs"):
        await SeededQueue(db).run(**column)
    assert await db.fetchval("SELECT count(*) FROM ops_runs") == 0
    assert await db.fetchval("SELECT count(*) FROM ops_run_keys") == 0


async def test_a_null_in_a_fixed_column_is_refused_as_null(db: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.NotNullViolationError):
        nulls: dict[str, Any] = {"labels": None, "priority": None}
        await SeededQueue(db).run(**nulls)


@pytest.mark.parametrize(
    "assignment",
    [
        "state = 'claimed'",  # a claim without an owner and a lease
        "state = 'waiting'",
        "attempt = -1",
        "cancelled_by = 'op'",  # only a failed run has a canceller
        "lease_until = now()",  # an open run has no lease
    ],
)
async def test_the_queue_columns_keep_their_shape(db: asyncpg.Connection, assignment: str) -> None:
    run = await SeededQueue(db).run()
    with pytest.raises(asyncpg.CheckViolationError, match="ops_runs_queue_shape"):
        await db.execute(f"UPDATE ops_runs SET {assignment} WHERE id = $1", run)
    assert await db.fetchval("SELECT state FROM ops_runs WHERE id = $1", run) == "open"


async def test_a_claim_and_a_close_check_one_constraint(db: asyncpg.Connection) -> None:
    """PostgreSQL evaluates every CHECK constraint of a table on every UPDATE and prepares
    each one again per statement: the queue's hot table has one, for the columns a claim
    or a close changes."""
    checks = await db.fetch(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'ops_runs'::regclass AND contype = 'c'"
    )
    assert [r["conname"] for r in checks] == ["ops_runs_queue_shape"]
