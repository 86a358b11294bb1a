"""Concurrent claims with the same filter, and concurrent common closes, share one
statement (queue/coalesce.py).

Each claimer must get what it would have got alone, one after another: its own rows, in
claim order, leased to it for its own lease, stale claims reopened first, filters never
mixed. Each closer must get what it would have got alone: its own close applied, and any
close outside the common case (another owner, an ended lease, a repeat of a run already in
the statement) answered by the locking path. Statements are counted by the service's own
histogram of requests per statement.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from ac_testkit import SeededQueue
from activity_core.queue.claim import ClaimSpec
from activity_core.queue.errors import QueueRefusal
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.service import QueueService
from ops_contracts import CloseDisposition, LabelsMode, RefusalCode

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


def statements(metrics: QueueMetrics, kind: str = "claim") -> tuple[float, float]:
    """(statements of this kind, requests they served) so far."""
    labels = {"statement": kind}
    count = metrics.registry.get_sample_value("ops_run_requests_per_statement_count", labels)
    total = metrics.registry.get_sample_value("ops_run_requests_per_statement_sum", labels)
    return count or 0.0, total or 0.0


def service(pool: asyncpg.Pool, metrics: QueueMetrics, batch_max: int = 32) -> QueueService:
    return QueueService(pool, max_attempts=3, metrics=metrics, coalesce_max=batch_max)


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


async def claimed_by(queue: QueueService, seeded: SeededQueue, workers: list[str]) -> list[Any]:
    """One run claimed by each worker, in order."""
    await seeded.runs(len(workers))
    answers = [await queue.claim(spec(w)) for w in workers]
    return [got[0]["id"] for got in answers]


async def test_concurrent_common_closes_share_statements_and_each_applies_its_own(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    metrics = QueueMetrics()
    queue = service(pool, metrics)
    workers = [f"w-{i:02d}" for i in range(12)]
    runs = await claimed_by(queue, seeded, workers)

    closes = [
        queue.complete(run_id, w, {"ok": True, "path": f"out/{w}.md"})
        if i % 2 == 0
        else queue.fail(run_id, w, f"failed at {w}", reopen=False, raw_result=None)
        for i, (run_id, w) in enumerate(zip(runs, workers, strict=True))
    ]
    answers = await asyncio.gather(*closes)
    count, served = statements(metrics, "close")
    assert served == 12 and count < 12  # closes shared statements

    for i, ((run, disposition), run_id, w) in enumerate(zip(answers, runs, workers, strict=True)):
        assert disposition is CloseDisposition.applied and run["id"] == run_id
        row = await seeded.row(run_id)
        assert row["claim_owner"] == w and row["lease_until"] is None
        assert row["close_intent_digest"] is not None
        if i % 2 == 0:
            assert row["state"] == "succeeded" and row["result"]["path"] == f"out/{w}.md"
            assert row["last_error"] is None
        else:
            assert row["state"] == "failed" and row["last_error"] == f"failed at {w}"
            assert row["result"] is None
        assert run["state"] == row["state"]


async def test_closes_outside_the_common_case_take_the_locking_path(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    metrics = QueueMetrics()
    queue = service(pool, metrics)
    ok, wrong, ended, twice, differ = await claimed_by(
        queue, seeded, ["w-ok", "w-wrong", "w-ended", "w-twice", "w-differ"]
    )
    await seeded.expire_lease(ended)
    result = {"ok": True, "path": "out/x.md"}
    outcomes: list[Any] = await asyncio.gather(
        queue.complete(ok, "w-ok", result),
        queue.complete(wrong, "w-intruder", result),
        queue.complete(ended, "w-ended", result),
        queue.complete(twice, "w-twice", result),
        queue.complete(twice, "w-twice", result),  # a retry racing the original
        queue.complete(differ, "w-differ", result),
        queue.complete(differ, "w-differ", {"ok": True, "path": "out/other.md"}),
        return_exceptions=True,
    )
    count, served = statements(metrics, "close")
    assert served >= 5 and count < 7

    def refusal(outcome: Any) -> RefusalCode:
        assert isinstance(outcome, QueueRefusal), outcome
        return outcome.code

    assert outcomes[0][1] is CloseDisposition.applied
    assert refusal(outcomes[1]) is RefusalCode.wrong_owner
    assert refusal(outcomes[2]) is RefusalCode.expired_lease
    assert sorted(o[1].value for o in outcomes[3:5]) == ["applied", "reconciled"]
    # one of two different intents lands; the other is a terminal conflict
    assert outcomes[5][1] is CloseDisposition.applied
    assert refusal(outcomes[6]) is RefusalCode.terminal_conflict
    assert (await seeded.row(differ))["result"]["path"] == "out/x.md"
    assert [(await seeded.row(r))["state"] for r in (wrong, ended)] == ["claimed", "claimed"]


async def test_a_run_repeated_in_one_statement_enters_it_once_and_the_first_close_wins(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    """A statement must not carry one run twice: which entry PostgreSQL's join applies
    would be arbitrary, so a retry racing its original, or a second intent, could overwrite
    the first close's answer. The first entry is in the statement; repeats go to the
    locking path and see the first one's outcome."""
    metrics = QueueMetrics()
    queue = service(pool, metrics)
    retried, conflicting = await claimed_by(queue, seeded, ["w-retry", "w-conflict"])
    first = {"ok": True, "path": "out/first.md"}
    # all four reach the coalescer before its call starts: one statement serves them
    outcomes: list[Any] = await asyncio.gather(
        queue.complete(retried, "w-retry", first),
        queue.complete(conflicting, "w-conflict", first),
        queue.complete(retried, "w-retry", first),
        queue.complete(conflicting, "w-conflict", {"ok": True, "path": "out/second.md"}),
        return_exceptions=True,
    )
    assert statements(metrics, "close") == (1.0, 2.0)  # two runs, each entered once
    assert outcomes[0][1] is CloseDisposition.applied
    assert outcomes[1][1] is CloseDisposition.applied
    assert outcomes[2][1] is CloseDisposition.reconciled
    assert isinstance(outcomes[3], QueueRefusal)
    assert outcomes[3].code is RefusalCode.terminal_conflict
    for run_id in (retried, conflicting):
        assert (await seeded.row(run_id))["result"]["path"] == "out/first.md"


async def test_coalesce_max_of_one_closes_alone(pool: asyncpg.Pool, seeded: SeededQueue) -> None:
    metrics = QueueMetrics()
    queue = service(pool, metrics, batch_max=1)
    workers = [f"w-{i}" for i in range(6)]
    runs = await claimed_by(queue, seeded, workers)
    answers = await asyncio.gather(
        *(queue.complete(r, w, {"ok": True}) for r, w in zip(runs, workers, strict=True))
    )
    assert all(d is CloseDisposition.applied for _, d in answers)
    assert statements(metrics, "close") == (6.0, 6.0)


async def test_a_run_held_by_another_transaction_never_stalls_the_closes_it_shares_with(
    pool: asyncpg.Pool, seeded: SeededQueue, db_dsn: str
) -> None:
    """The shared statement skips a held run: the other closes apply at once, and the held
    run's close waits alone on the locking path, then applies. (Waiting in the shared
    statement would stall every close queued behind it, and two shared statements holding
    each other's runs would deadlock.)"""
    metrics = QueueMetrics()
    queue = service(pool, metrics)
    a, b, c = await claimed_by(queue, seeded, ["w-a", "w-b", "w-c"])
    other = await asyncpg.connect(db_dsn)
    try:
        holding = other.transaction()
        await holding.start()
        await other.execute("SELECT 1 FROM ops_runs WHERE id = $1 FOR UPDATE", b)
        held = asyncio.create_task(queue.complete(b, "w-b", {"ok": True}))
        free = asyncio.gather(
            queue.complete(a, "w-a", {"ok": True}), queue.complete(c, "w-c", {"ok": True})
        )
        answers = await asyncio.wait_for(free, 10)  # not behind b's lock
        assert [d for _, d in answers] == [CloseDisposition.applied] * 2
        await asyncio.sleep(0.2)
        assert not held.done()  # b waits for its row, alone
        assert (await seeded.row(b))["state"] == "claimed"
        await holding.commit()
        _, disposition = await asyncio.wait_for(held, 10)
    finally:
        await other.close()
    assert disposition is CloseDisposition.applied
    assert [(await seeded.row(r))["state"] for r in (a, b, c)] == ["succeeded"] * 3
    count, served = statements(metrics, "close")
    assert served == 3 and count < 3
