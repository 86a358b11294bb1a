"""Concurrent claims with the same filter share one leasing statement (queue/coalesce.py).

Each claimer must get what it would have got alone, one after another: its own rows, in
claim order, leased to it for its own lease, stale claims reopened first, filters never
mixed. The statements are counted by the service's own histogram of claims per statement.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from ac_testkit import SeededQueue
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.service import ClaimSpec, QueueService
from ops_contracts import LabelsMode

PRIORITY_RANK = {"high": 0, "medium": 1, "low": 2}


def spec(worker_id: str, *, limit: int = 1, lease: int = 900, **kw: Any) -> ClaimSpec:
    return ClaimSpec(
        worker_id=worker_id,
        labels=kw.get("labels"),
        labels_mode=kw.get("labels_mode", LabelsMode.any),
        limit=limit,
        lease_seconds=lease,
        wait_seconds=0,
    )


def statements(metrics: QueueMetrics) -> tuple[float, float]:
    """(leasing statements, claims they served) so far."""
    count = metrics.registry.get_sample_value("ops_run_claims_per_statement_count")
    total = metrics.registry.get_sample_value("ops_run_claims_per_statement_sum")
    return count or 0.0, total or 0.0


def service(pool: asyncpg.Pool, metrics: QueueMetrics, batch_max: int = 32) -> QueueService:
    return QueueService(pool, max_attempts=3, metrics=metrics, claim_batch_max=batch_max)


async def seed_mixed(seeded: SeededQueue, n: int) -> list[uuid.UUID]:
    """n open runs of mixed priority and age; answers their ids in claim order."""
    base = datetime.now().astimezone() - timedelta(days=1)
    made: list[tuple[int, datetime, uuid.UUID]] = []
    for i in range(n):
        priority = ("low", "high", "medium")[i % 3]
        created = base + timedelta(seconds=(i * 7919) % n)
        run_id = await seeded.run(priority=priority, created_at=created)
        made.append((PRIORITY_RANK[priority], created, run_id))
    return [run_id for *_, run_id in sorted(made)]


async def test_concurrent_claims_share_statements_and_each_gets_its_own_rows_in_order(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    order = await seed_mixed(seeded, 60)
    metrics = QueueMetrics()
    queue = service(pool, metrics)
    workers = [f"worker-{i:02d}" for i in range(20)]
    answers = await asyncio.gather(
        *(queue.claim(spec(w, limit=2, lease=60 + i)) for i, w in enumerate(workers))
    )
    count, served = statements(metrics)
    assert served == 20 and count < 20  # claims shared statements

    claimed = [run["id"] for runs in answers for run in runs]
    assert len(claimed) == len(set(claimed)) == 40
    assert set(claimed) == set(order[:40])  # the head of the queue, nothing skipped
    rank = {run_id: i for i, run_id in enumerate(order)}
    for i, (worker, runs) in enumerate(zip(workers, answers, strict=True)):
        assert len(runs) == 2
        assert [rank[r["id"]] for r in runs] == sorted(rank[r["id"]] for r in runs)
        for run in runs:
            row = await seeded.row(run["id"])
            assert row["state"] == "claimed" and row["claim_owner"] == worker
            assert row["attempt"] == 1
            # lease_until and updated_at both read the statement's now()
            assert row["lease_until"] - row["updated_at"] == timedelta(seconds=60 + i)
            assert run["lease_until"] == row["lease_until"]


async def test_claims_with_other_filters_never_share_a_statement(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    for _ in range(6):
        await seeded.run(labels=["alpha"])
        await seeded.run(labels=["beta"])
        await seeded.run(labels=["alpha", "beta"])
    queue = service(pool, QueueMetrics())
    claims = [spec(f"a-{i}", labels=["alpha"], labels_mode=LabelsMode.all) for i in range(6)]
    claims += [spec(f"b-{i}", labels=["beta"], labels_mode=LabelsMode.all) for i in range(6)]
    claims += [
        spec(f"ab-{i}", labels=["alpha", "beta"], labels_mode=LabelsMode.all) for i in range(6)
    ]
    answers = await asyncio.gather(*(queue.claim(c) for c in claims))
    for claim, runs in zip(claims, answers, strict=True):
        assert claim.labels is not None
        for run in runs:
            assert set(claim.labels) <= set(run["labels"]), (claim.worker_id, run["labels"])
    claimed = [run["id"] for runs in answers for run in runs]
    assert len(claimed) == len(set(claimed))


async def test_a_stale_claim_is_reopened_before_coalesced_claims_select(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    runs = await seeded.runs(20)
    metrics = QueueMetrics()
    queue = service(pool, metrics)
    (first,) = await queue.claim(spec("gone-worker"))
    assert first["id"] == runs[0]
    await seeded.expire_lease(runs[0])

    # more open runs than claimers: only a reclaim before the select hands out the stale
    # run (the oldest), so the coalesced statement must not select past it
    answers = await asyncio.gather(*(queue.claim(spec(f"w-{i}")) for i in range(10)))
    claimed = [run["id"] for got in answers for run in got]
    assert sorted(claimed) == sorted(runs[:10])
    row = await seeded.row(runs[0])
    assert row["attempt"] == 2 and row["claim_owner"].startswith("w-")
    assert (
        metrics.registry.get_sample_value("ops_run_leases_ended_total", {"outcome": "reopened"})
        == 1.0
    )


async def test_claimers_past_the_end_of_the_queue_share_what_is_left(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    runs = await seeded.runs(5)
    queue = service(pool, QueueMetrics())
    answers = await asyncio.gather(*(queue.claim(spec(f"w-{i}", limit=2)) for i in range(6)))
    claimed = [run["id"] for got in answers for run in got]
    assert sorted(claimed) == sorted(runs)
    assert all(len(got) <= 2 for got in answers)


async def test_a_statement_leases_at_most_500_rows(pool: asyncpg.Pool, seeded: SeededQueue) -> None:
    definition = await seeded.definition()
    await seeded.conn.execute(
        """
        INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title,
                              source_type, source_id, triggering_event_id, created_at)
        SELECT gen_random_uuid(), $1, 'bulk:' || g, 'research/briefs', 'run ' || g,
               'rule', 'rule-1', 'bulk:' || g, now() - make_interval(secs => g)
        FROM generate_series(1, 1200) AS g
        """,
        definition,
    )
    metrics = QueueMetrics()
    queue = service(pool, metrics)
    answers = await asyncio.gather(*(queue.claim(spec(f"w-{i}", limit=100)) for i in range(12)))
    assert sorted(len(got) for got in answers) == [100] * 12
    count, served = statements(metrics)
    assert served == 12 and count >= 3  # 100-row claims: at most 5 per statement


async def test_batch_max_of_one_turns_coalescing_off(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    runs = await seeded.runs(10)
    metrics = QueueMetrics()
    queue = service(pool, metrics, batch_max=1)
    answers = await asyncio.gather(*(queue.claim(spec(f"w-{i}")) for i in range(10)))
    assert sorted(run["id"] for got in answers for run in got) == sorted(runs)
    assert statements(metrics) == (10.0, 10.0)
