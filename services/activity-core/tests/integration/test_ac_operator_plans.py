"""The operator plane's statements on ops_runs read indexes at a million rows.

One table of 1,000,000 runs shaped like a queue that has run for a while: nearly all
succeeded, some failed and expired, a backlog of open runs, a few claims (some stale),
some successors. Each statement's plan must read the index named in operator/queries.py
(and queue/queries.py for the listing filters), never scan the table.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from ac_testkit import SeededQueue
from activity_core.operator import queries
from activity_core.queue import queries as queue_queries

ROWS = 1_000_000
pytestmark = pytest.mark.timeout(600)


async def _plan(conn: asyncpg.Connection, sql: str, *args: object) -> str:
    rows = await conn.fetch(f"EXPLAIN (FORMAT JSON) {sql}", *args)
    value = rows[0][0]
    return json.dumps(json.loads(value) if isinstance(value, str) else value)


@pytest.fixture
async def big(db: asyncpg.Connection) -> dict[str, Any]:
    definition = await SeededQueue(db).definition()
    # g % 1000: 0-4 open (0.5%), 5 claimed (half of them stale), 6-15 failed (1%),
    # 16-18 expired, the rest succeeded; one failed run in 100 has a successor below
    await db.execute(
        """
        INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title,
                              source_type, source_id, triggering_event_id, state, claim_owner,
                              lease_until, attempt, priority, labels, created_at)
        SELECT gen_random_uuid(), $1, 'bulk:' || g, 'r/r', 't', 'rule', 'r', 'e:' || g,
               CASE WHEN g % 1000 < 5 THEN 'open'
                    WHEN g % 1000 = 5 THEN 'claimed'
                    WHEN g % 1000 < 16 THEN 'failed'
                    WHEN g % 1000 < 19 THEN 'expired'
                    ELSE 'succeeded' END,
               CASE WHEN g % 1000 < 5 THEN NULL ELSE 'w-' || (g % 50) END,
               CASE WHEN g % 1000 = 5
                    THEN now() + make_interval(secs => CASE WHEN g % 2000 = 5 THEN -60 ELSE 600 END)
               END,
               CASE WHEN g % 1000 < 5 THEN 0 ELSE 1 END,
               (ARRAY['low','medium','high'])[1 + g % 3],
               '["automated"]'::jsonb,
               now() - make_interval(secs => g)
        FROM generate_series(1, $2) AS g
        """,
        definition,
        ROWS,
    )
    await db.execute(
        """
        INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title,
                              source_type, source_id, triggering_event_id, requeued_from)
        SELECT gen_random_uuid(), activity_definition_id, 'requeue/' || id, target_repo, title,
               source_type, source_id, triggering_event_id, id
        FROM ops_runs WHERE state = 'failed' AND random() < 0.01
        """
    )
    await db.execute("VACUUM ANALYZE ops_runs, ops_run_keys")
    failed = await db.fetchval(
        "SELECT id FROM ops_runs WHERE state = 'failed' ORDER BY created_at DESC LIMIT 1"
    )
    open_run = await db.fetchval(
        "SELECT id FROM ops_runs WHERE state = 'open' ORDER BY created_at LIMIT 1"
    )
    return {"definition": definition, "failed": failed, "open": open_run}


def _reads(plan: str, *indexes: str) -> None:
    assert "Seq Scan" not in plan, plan
    for index in indexes:
        assert index in plan, (index, plan)


async def test_the_operator_statements_read_indexes_at_a_million_rows(
    db: asyncpg.Connection, big: dict[str, Any]
) -> None:
    day_ago = datetime.now(UTC) - timedelta(hours=24)
    async with db.transaction():
        _reads(
            await _plan(db, queries.SUMMARY, day_ago),
            "ops_runs_open_claim_order",
            "ops_runs_claimed_lease",
            "ops_runs_by_terminal_state",
        )
        _reads(
            await _plan(db, queries.DEAD_LETTER_PAGE, None, None, None, 51, None),
            "ops_runs_by_terminal_state",
            "ops_runs_by_requeued_from",
        )
        _reads(
            await _plan(db, queries.DEAD_LETTER_PAGE, big["definition"], None, None, 51, False),
            "ops_runs_by_requeued_from",
        )
        _reads(await _plan(db, queries.RUNS_HELD), "ops_runs_claimed_lease")
        _reads(await _plan(db, queries.OPEN_AHEAD, big["open"]), "ops_runs_open_claim_order")
        _reads(
            await _plan(db, queries.RUN_BY_KEY, "requeue/x"),
            "ops_run_keys_idempotency_key_key",
            "ops_runs_pkey",
        )
        _reads(await _plan(db, queries.REQUEUE_SOURCE, big["failed"]), "ops_runs_pkey")
        _reads(
            await _plan(db, queries.REQUEUE, big["failed"], uuid.uuid4(), "requeue/y"),
            "ops_runs_pkey",
        )
        _reads(
            await _plan(db, queue_queries.GET_RUN, big["failed"]),
            "ops_runs_pkey",
            "ops_runs_by_requeued_from",
        )
        _reads(
            await _plan(db, queue_queries.REQUEUED_AS, big["failed"]), "ops_runs_by_requeued_from"
        )

        def listing(**filters: Any) -> list[Any]:
            args: dict[str, Any] = {
                "state": None,
                "labels": None,
                "definition": None,
                "repo": None,
                "cursor_at": None,
                "cursor_id": None,
                "limit": 51,
                "worker": None,
                "after": None,
                "before": None,
            }
            args.update(filters)
            return list(args.values())

        # a time window is a range of the listing index of ops_run_keys; the worker filter
        # reads it too (newest first, stopping at the page), or a state's own index
        listing_index = ("ops_run_keys_listing", "ops_runs_pkey")
        _reads(await _plan(db, queue_queries.LIST_RUNS, *listing()), *listing_index)
        _reads(
            await _plan(
                db,
                queue_queries.LIST_RUNS,
                *listing(after=day_ago, before=day_ago + timedelta(hours=1)),
            ),
            *listing_index,
        )
        _reads(await _plan(db, queue_queries.LIST_RUNS, *listing(worker="w-7")), *listing_index)
        _reads(
            await _plan(db, queue_queries.LIST_RUNS, *listing(repo="r/r", labels=["automated"])),
            "ops_run_keys",
        )
        _reads(
            await _plan(
                db, queue_queries.LIST_RUNS, *listing(definition=big["definition"], after=day_ago)
            ),
            "ops_run_keys",
        )
        in_state = queue_queries.LIST_RUNS_IN_STATE
        _reads(
            await _plan(db, in_state, *listing(worker="w-7", state="claimed")),
            "ops_runs_claimed_lease",
        )
        # either partial index of the open rows (claim order, or the labels' bitmap)
        _reads(await _plan(db, in_state, *listing(state="open")), "ops_runs_open_")
        for state in ("failed", "expired", "succeeded"):
            _reads(
                await _plan(db, in_state, *listing(state=state, definition=big["definition"])),
                "ops_runs_by_terminal_state",
            )

    # the summary reads the live queue (5,000 open, 1,000 claimed) and a day of terminal
    # runs (~86,000 index entries), not the million
    rows = await db.fetch(
        f"EXPLAIN (ANALYZE, FORMAT JSON) {queries.SUMMARY}", datetime.now(UTC) - timedelta(hours=24)
    )
    value = rows[0][0]
    analyzed = json.loads(value) if isinstance(value, str) else value
    assert analyzed[0]["Execution Time"] < 1000, analyzed[0]["Execution Time"]
