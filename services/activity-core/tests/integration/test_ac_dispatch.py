"""Long-poll waiters are served by the process's claim dispatcher (queue/dispatch.py): one
opened run costs a bounded number of transactions whatever the number of idle waiters, the
oldest matching waiter gets it, no wake-up is lost (listener reconnect, label filters,
limits, waiters that leave), and a run leased for a waiter that left goes back at once."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ac_testkit import SeededQueue
from activity_core.db.pool import create_pool
from activity_core.queue import dispatch
from activity_core.queue.claim import ClaimSpec
from activity_core.queue.claim_types import Claimer, ClaimKey
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.service import QueueService
from activity_core.queue.wakeups import LISTENER_APPLICATION_NAME, OpenRunSignal, opened_labels
from ops_contracts import LabelsMode


def spec(
    worker_id: str,
    *,
    labels: list[str] | None = None,
    mode: LabelsMode = LabelsMode.any,
    limit: int = 1,
    wait: int = 20,
) -> ClaimSpec:
    return ClaimSpec(
        worker_id=worker_id,
        labels=labels,
        labels_mode=mode,
        limit=limit,
        lease_seconds=900,
        wait_seconds=wait,
    )


@pytest.fixture
async def queue(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[QueueService]:
    signal = OpenRunSignal(dsn=db_dsn, reconnect_delay=0.2)
    await signal.start()
    service = QueueService(pool, max_attempts=3, metrics=QueueMetrics(), signal=signal)
    try:
        yield service
    finally:
        service.drain_long_polls()
        await signal.stop()


async def until_waiting(queue: QueueService, n: int) -> None:
    for _ in range(200):
        if queue._claims.dispatcher.waiting == n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{queue._claims.dispatcher.waiting} waiting, not {n}")


async def committed(conn: asyncpg.Connection, settle: float = 10.5) -> int:
    # A backend that went idle within a second of its last flush sends its counters 10 s
    # later (PostgreSQL 15, PGSTAT_IDLE_INTERVAL): wait them out.
    await asyncio.sleep(settle)
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    value = await conn.fetchval(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    )
    return int(value)


async def test_one_opened_run_costs_a_bounded_number_of_transactions_for_many_waiters(
    db_dsn: str, seeded: SeededQueue
) -> None:
    """100 idle waiters, runs opened one at a time: one claim transaction per run."""
    await seeded.definition()
    # Two connections, warmed first: preparing a statement on a fresh connection is a
    # transaction of its own, which is not what is measured here.
    small = await create_pool(db_dsn, min_size=2, max_size=2)
    signal = OpenRunSignal(dsn=db_dsn)
    await signal.start()
    queue = QueueService(small, max_attempts=3, metrics=QueueMetrics(), signal=signal)
    # waits outlast the three readings of the counter (10 s each)
    waiters = [asyncio.create_task(queue.claim(spec(f"w{i}", wait=60))) for i in range(100)]
    try:
        await until_waiting(queue, 100)
        for _ in range(3):
            await open_one_and_wait(queue, seeded)
        # Two windows, the fewer counted: the counter is the whole database's, and a
        # transaction of nobody here (autovacuum's analyze) can only add to a window.
        rounds = 5
        readings = [await committed(seeded.conn)]
        for _ in range(2):
            for _ in range(rounds):
                await open_one_and_wait(queue, seeded)
            readings.append(await committed(seeded.conn))
        # counted besides the claims: the two transactions that read the counter, the
        # emissions
        claim_transactions = min(
            after - before - 2 - rounds for before, after in itertools.pairwise(readings)
        )
        # one claim statement per run; the slack covers a statement still to be prepared
        # on one of the two connections (a transaction of its own). Before the dispatcher
        # this was about 2 per waiter per run: 1,000 here.
        assert claim_transactions <= rounds + 2, readings
    finally:
        queue.drain_long_polls()
        await asyncio.gather(*waiters, return_exceptions=True)
        await signal.stop()
        await small.close()


async def test_an_empty_long_poll_costs_one_transaction(db_dsn: str, seeded: SeededQueue) -> None:
    """A claim that will wait and finds nothing open (and no stale claim) stops at its
    first statement: an idle fleet's return to the long poll is one transaction per
    claim, not three (claim, reclaim, claim again)."""
    await seeded.definition()
    small = await create_pool(db_dsn, min_size=1, max_size=1)
    signal = OpenRunSignal(dsn=db_dsn)
    await signal.start()
    queue = QueueService(small, max_attempts=3, metrics=QueueMetrics(), signal=signal)
    try:
        assert await queue.claim(spec("warm", wait=1)) == []  # prepares the statement
        before = await committed(seeded.conn)
        polls = 8
        for i in range(polls):
            assert await queue.claim(spec(f"idle{i}", wait=1)) == []
        after = await committed(seeded.conn)
        # the slack: the reads of the counter are transactions too, and a backend's own
        # count reaches pg_stat_database at its next flush (3 seen with no claim at all);
        # three statements per poll, as before, would be 24
        assert after - before <= polls + 3, after - before
    finally:
        queue.drain_long_polls()
        await signal.stop()
        await small.close()


async def open_one_and_wait(queue: QueueService, seeded: SeededQueue) -> None:
    """Open a run, see the oldest waiter get it and the others keep waiting."""
    dispatcher = queue._claims.dispatcher
    n = dispatcher.waiting
    [lane] = dispatcher._waiters.values()
    oldest = next(iter(lane.values()))
    run_id = await seeded.run()
    [run] = await asyncio.wait_for(asyncio.shield(oldest.future), 5)
    assert (run["id"], run["claim_owner"]) == (run_id, oldest.claimer.worker_id)
    await asyncio.sleep(0.05)
    assert dispatcher.waiting == n - 1


async def test_a_run_leased_for_a_waiter_that_left_goes_back_to_the_queue_at_once(
    queue: QueueService, seeded: SeededQueue
) -> None:
    await seeded.definition()
    dispatcher = queue._claims.dispatcher
    # what Claims.claim registers after its own empty claim; abandon() is what its
    # cancellation handler runs when the request is cancelled after the hand-out
    waiter = dispatcher.register(
        ClaimKey("none", (), 1), Claimer("leaving", 900), seen=dispatcher.generation
    )
    run_id = await seeded.run()
    [leased] = await asyncio.wait_for(waiter.future, 5)
    assert leased["claim_owner"] == "leaving"
    await dispatcher.abandon(waiter)
    row = await seeded.row(run_id)
    assert (row["state"], row["claim_owner"], row["attempt"]) == ("open", None, 0)
    # and the next waiter gets it, as a first attempt
    [run] = await asyncio.wait_for(queue.claim(spec("next")), 5)
    assert (run["id"], run["attempt"], run["claim_owner"]) == (run_id, 1, "next")


async def test_a_waiter_cancelled_while_the_pass_claims_for_it_loses_no_run(
    queue: QueueService, seeded: SeededQueue
) -> None:
    await seeded.definition()
    leaving = asyncio.create_task(queue.claim(spec("leaving")))
    await until_waiting(queue, 1)
    staying = asyncio.create_task(queue.claim(spec("staying")))
    await until_waiting(queue, 2)
    run_id = await seeded.run()
    leaving.cancel()  # before or during the pass: either way the run is not lost
    [run] = await asyncio.wait_for(staying, 5)
    assert run["id"] == run_id
    row = await seeded.row(run_id)
    assert (row["state"], row["claim_owner"], row["attempt"]) == ("claimed", "staying", 1)


async def test_a_claim_cancelled_while_its_own_statement_runs_gives_the_run_back(
    queue: QueueService, seeded: SeededQueue, db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The client went away while the claim's own leasing statement was on its way: the
    run it leased is open again at once (not leased, unseen, for the whole lease)."""
    caplog.set_level(logging.INFO, logger="activity_core.queue")
    await seeded.definition()
    run_id = await seeded.run()
    blocker = await asyncpg.connect(db_dsn)
    try:
        tx = blocker.transaction()
        await tx.start()
        # FOR UPDATE waits behind this lock: the claim's statement is sent and held
        await blocker.execute("LOCK TABLE ops_runs IN EXCLUSIVE MODE")
        leaving = asyncio.create_task(queue.claim(spec("leaving", wait=0)))
        await asyncio.sleep(0.3)
        leaving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        await tx.commit()
    finally:
        await blocker.close()
    # the statement, let through now, leases the run; the release follows it
    for _ in range(100):
        if any(r.getMessage() == "undelivered claim released" for r in caplog.records):
            break
        await asyncio.sleep(0.05)
    row = await seeded.row(run_id)
    assert (row["state"], row["claim_owner"], row["attempt"]) == ("open", None, 0)
    [run] = await queue.claim(spec("next", wait=0))
    assert (run["id"], run["attempt"], run["claim_owner"]) == (run_id, 1, "next")


async def test_a_listener_reconnect_sweeps_for_runs_opened_while_it_was_down(
    queue: QueueService, seeded: SeededQueue
) -> None:
    await seeded.definition()
    waiting = asyncio.create_task(queue.claim(spec("w", labels=["gpu"])))
    await until_waiting(queue, 1)
    killed = await seeded.conn.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = $1 AND datname = current_database()",
        LISTENER_APPLICATION_NAME,
    )
    assert killed == 1
    # opened while nobody listens: its NOTIFY is lost, the reconnect's sweep finds it
    run_id = await seeded.run(labels=["gpu"])
    [run] = await asyncio.wait_for(waiting, 10)
    assert run["id"] == run_id


async def test_a_run_opened_while_no_waiter_matched_is_taken_by_the_next_matching_claim(
    queue: QueueService, seeded: SeededQueue
) -> None:
    await seeded.definition()
    other = asyncio.create_task(queue.claim(spec("cpu", labels=["cpu"], wait=2)))
    await until_waiting(queue, 1)
    run_id = await seeded.run(labels=["gpu"])
    assert await other == []
    [run] = await queue.claim(spec("gpu", labels=["gpu"]))
    assert run["id"] == run_id


def dispatch_statements(queue: QueueService) -> int:
    labels = {"statement": "dispatch"}
    registry = queue._claims._metrics.registry
    return int(registry.get_sample_value("ops_run_requests_per_statement_count", labels) or 0)


async def test_a_run_costs_no_statement_for_the_keys_it_cannot_match(
    queue: QueueService, seeded: SeededQueue
) -> None:
    """The NOTIFY names the opened run's labels (migration 0013): waiters whose key cannot
    match it cost nothing; the one that can gets it in one statement."""
    await seeded.definition()
    cpu = [asyncio.create_task(queue.claim(spec(f"cpu{i}", labels=["cpu"]))) for i in range(5)]
    both = asyncio.create_task(
        queue.claim(spec("both", labels=["gpu", "big"], mode=LabelsMode.all))
    )
    await until_waiting(queue, 6)
    before = dispatch_statements(queue)
    no_match = await seeded.run(labels=["gpu"])  # 'all' of gpu+big: not this one
    await asyncio.sleep(0.3)
    assert dispatch_statements(queue) == before
    run_id = await seeded.run(labels=["big", "gpu"])
    [run] = await asyncio.wait_for(both, 5)
    assert run["id"] == run_id
    assert dispatch_statements(queue) == before + 1
    assert all(not task.done() for task in cpu)
    assert (await seeded.row(no_match))["state"] == "open"
    for task in cpu:
        task.cancel()
    await asyncio.gather(*cpu, return_exceptions=True)


async def test_a_stale_claim_that_holds_the_pass_back_is_reopened_and_handed_first(
    queue: QueueService, seeded: SeededQueue
) -> None:
    """A pass whose statement a stale claim held back reopens it and serves the waiter
    in claim order: the older, stale run first (its second attempt)."""
    await seeded.definition()
    [stale_id] = await seeded.runs(1)
    [claimed] = await queue.claim(spec("dead", wait=0))
    assert claimed["id"] == stale_id
    waiting = asyncio.create_task(queue.claim(spec("alive")))
    await until_waiting(queue, 1)
    await seeded.expire_lease(stale_id)
    fresh_id = await seeded.run()
    [run] = await asyncio.wait_for(waiting, 5)
    assert (run["id"], run["attempt"], run["claim_owner"]) == (stale_id, 2, "alive")
    assert (await seeded.row(fresh_id))["state"] == "open"


async def test_two_replicas_cost_one_claim_transaction_each_per_opened_run(
    db_dsn: str, seeded: SeededQueue
) -> None:
    """Two API processes' dispatchers (each its own pool and listener) on one database,
    50 waiters each: an opened run costs the winner one statement and the other one
    statement that finds it taken, never a reclaim (issue 34: at most 3 transactions per
    opened run with the emission, with two processes)."""
    await seeded.definition()
    replicas = []
    for _ in range(2):
        small = await create_pool(db_dsn, min_size=2, max_size=2)
        signal = OpenRunSignal(dsn=db_dsn)
        await signal.start()
        service = QueueService(small, max_attempts=3, metrics=QueueMetrics(), signal=signal)
        replicas.append((small, signal, service))
    waiters = [
        asyncio.create_task(service.claim(spec(f"r{n}w{i}")))
        for n, (_, _, service) in enumerate(replicas)
        for i in range(50)
    ]
    try:
        for _, _, service in replicas:
            await until_waiting(service, 50)
        # warm every connection's statements (a first prepare is a transaction of its own)
        for _ in range(6):
            await open_one_and_wait_any(replicas, seeded)
        before = await committed(seeded.conn)
        rounds = 5
        opened = [await open_one_and_wait_any(replicas, seeded, check=False) for _ in range(rounds)]
        after = await committed(seeded.conn)
        per_run = (after - before - 2) / rounds  # the two reads of `before`
        # the emission, the winner's claim, the other replica's empty claim
        assert per_run <= 3, per_run
        for run_id in opened:
            assert (await seeded.row(run_id))["state"] == "claimed"
    finally:
        for _, _, service in replicas:
            service.drain_long_polls()
        await asyncio.gather(*waiters, return_exceptions=True)
        for small, listener, _ in replicas:
            await listener.stop()
            await small.close()


async def open_one_and_wait_any(
    replicas: list[tuple[asyncpg.Pool, OpenRunSignal, QueueService]],
    seeded: SeededQueue,
    *,
    check: bool = True,
) -> uuid.UUID:
    """Open a run and see one waiter of one replica get it (`check`: read its row, a
    transaction of its own, so not while transactions are counted)."""
    waiting = sum(service._claims.dispatcher.waiting for _, _, service in replicas)
    run_id = await seeded.run()
    for _ in range(200):
        if sum(s._claims.dispatcher.waiting for _, _, s in replicas) == waiting - 1:
            break
        await asyncio.sleep(0.01)
    if check:
        row = await seeded.row(run_id)
        assert row["state"] == "claimed", row
    await asyncio.sleep(0.1)  # the other replica's pass has run
    assert sum(s._claims.dispatcher.waiting for _, _, s in replicas) == waiting - 1
    return run_id


async def test_the_notification_names_the_opened_runs_labels(
    seeded: SeededQueue, db_dsn: str
) -> None:
    await seeded.definition()
    listener = await asyncpg.connect(db_dsn)
    payloads: asyncio.Queue[str] = asyncio.Queue()
    try:
        await listener.add_listener("ops_runs_open", lambda *args: payloads.put_nowait(args[3]))
        await seeded.run(labels=["gpu", "big"])
        assert opened_labels(await asyncio.wait_for(payloads.get(), 5)) == frozenset({"gpu", "big"})
        await seeded.run(labels=[])
        assert opened_labels(await asyncio.wait_for(payloads.get(), 5)) == frozenset()
        # too long for a notification: empty, "anything may have opened"
        await seeded.run(labels=[f"label-{i:04d}-" + "x" * 80 for i in range(100)])
        assert await asyncio.wait_for(payloads.get(), 5) == ""
    finally:
        await listener.close()


LABELS = ["a", "b", "c"]

waiter_specs = st.tuples(
    st.lists(st.sampled_from(LABELS), max_size=2, unique=True),  # [] = no filter
    st.sampled_from([LabelsMode.any, LabelsMode.all]),
    st.integers(1, 3),  # limit
    st.booleans(),  # leaves (cancelled) mid-way
)
run_specs = st.lists(st.sampled_from(LABELS), min_size=1, max_size=2, unique=True)


def matches(run_labels: list[str], labels: list[str], mode: LabelsMode) -> bool:
    if not labels:
        return True
    if mode is LabelsMode.any:
        return bool(set(labels) & set(run_labels))
    return set(labels) <= set(run_labels)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    waiters=st.lists(waiter_specs, min_size=1, max_size=8),
    runs=st.lists(run_specs, min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
async def test_every_open_run_is_taken_while_a_matching_waiter_waits(
    queue: QueueService,
    seeded: SeededQueue,
    waiters: list[tuple[list[str], LabelsMode, int, bool]],
    runs: list[list[str]],
    seed: int,
) -> None:
    await seeded.definition()
    await seeded.conn.execute("DELETE FROM ops_runs")
    rng = random.Random(seed)
    tasks: list[tuple[asyncio.Task[list[dict[str, Any]]], tuple[Any, ...]]] = []
    try:
        events: list[tuple[str, Any]] = [("waiter", w) for w in waiters]
        events += [("run", r) for r in runs]
        rng.shuffle(events)
        opened: dict[uuid.UUID, list[str]] = {}
        for n, (kind, item) in enumerate(events):
            if kind == "waiter":
                labels, mode, limit, _ = item
                task = asyncio.create_task(
                    queue.claim(spec(f"w{n}", labels=labels, mode=mode, limit=limit, wait=30))
                )
                tasks.append((task, item))
            else:
                opened[await seeded.run(labels=item)] = item
            await asyncio.sleep(rng.choice([0, 0.01, 0.05]))
            for task, (_, _, _, leaves) in tasks:
                if leaves and not task.done() and rng.random() < 0.3:
                    task.cancel()
        # settle: every pass and every release has run
        await asyncio.sleep(0.5)
        handed: dict[uuid.UUID, str] = {}
        for task, (labels, mode, limit, _) in tasks:
            if not task.done():
                continue
            if task.cancelled():
                continue
            got = task.result()
            assert len(got) <= limit
            for run in got:
                assert run["id"] not in handed, "a run handed to two waiters"
                handed[run["id"]] = run["claim_owner"]
                assert matches(opened[run["id"]], labels, mode), (run, labels, mode)
        rows = await seeded.conn.fetch("SELECT id, state, claim_owner, labels FROM ops_runs")
        still_waiting = [item for task, item in tasks if not task.done()]
        for row in rows:
            if row["state"] == "claimed":
                # leased only to a waiter that got it in its answer
                assert handed.get(row["id"]) == row["claim_owner"], row
            else:
                assert row["state"] == "open"
                for labels, mode, _, _ in still_waiting:
                    assert not matches(opened[row["id"]], labels, mode), (
                        "an open run while a matching waiter waits",
                        row,
                        labels,
                        mode,
                    )
    finally:
        # also when an assertion failed: the fixture's queue serves the next example
        for task, _ in tasks:
            task.cancel()
        await asyncio.gather(*(t for t, _ in tasks), return_exceptions=True)
        await asyncio.sleep(0.1)
    assert queue._claims.dispatcher.waiting == 0


def own_statements(queue: QueueService) -> int:
    """Claim statements the claims sent themselves (each observes the claim latency)."""
    registry = queue._claims._metrics.registry
    return int(registry.get_sample_value("ops_run_claim_seconds_count") or 0)


def polls_without_statement(queue: QueueService) -> int:
    registry = queue._claims._metrics.registry
    name = "ops_run_long_polls_without_statement_total"
    return int(registry.get_sample_value(name) or 0)


async def test_an_idle_fleets_return_to_the_poll_costs_no_statement(
    queue: QueueService, seeded: SeededQueue
) -> None:
    """A statement just found nothing open for the key and nothing opened since: the
    next long polls of that key wait without a statement of their own, and still get the
    next run that opens, oldest first."""
    await seeded.definition()
    assert await queue.claim(spec("first", wait=1)) == []
    statements = own_statements(queue)
    returning = [asyncio.create_task(queue.claim(spec(f"idle{i}"))) for i in range(20)]
    await until_waiting(queue, 20)
    assert own_statements(queue) == statements
    assert polls_without_statement(queue) == 20
    run_id = await seeded.run()
    [run] = await asyncio.wait_for(returning[0], 5)
    assert (run["id"], run["claim_owner"]) == (run_id, "idle0")
    for task in returning[1:]:
        task.cancel()
    await asyncio.gather(*returning[1:], return_exceptions=True)


async def test_a_run_opened_since_the_empty_look_is_claimed_by_the_next_poll_itself(
    queue: QueueService, seeded: SeededQueue
) -> None:
    """A wake-up its key may match ends the trust in the empty look: the next poll sends
    its own statement and gets the run at once. One the key cannot match does not."""
    await seeded.definition()
    assert await queue.claim(spec("first", labels=["gpu"], wait=1)) == []
    await seeded.run(labels=["cpu"])  # nobody waits for cpu; gpu's trust holds
    await asyncio.sleep(0.2)
    skipped = polls_without_statement(queue)
    assert await queue.claim(spec("second", labels=["gpu"], wait=1)) == []
    assert polls_without_statement(queue) == skipped + 1
    run_id = await seeded.run(labels=["gpu", "big"])
    await asyncio.sleep(0.2)  # its NOTIFY arrived; no waiter took it
    [run] = await asyncio.wait_for(queue.claim(spec("third", labels=["gpu"], wait=1)), 5)
    assert (run["id"], run["claim_owner"]) == (run_id, "third")
    assert polls_without_statement(queue) == skipped + 1


async def test_a_lease_gone_stale_meanwhile_is_found_once_the_trust_has_run_out(
    queue: QueueService, seeded: SeededQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease that goes stale sends no NOTIFY: a poll within the trust waits without
    looking, and the first poll after it looks, reopens the stale claim and gets it."""
    # "first" waits 1 s after its look, "within" comes then and waits 1 s more
    monkeypatch.setattr(dispatch, "EMPTY_TRUSTED_SECONDS", 1.5)
    await seeded.definition()
    [stale_id] = await seeded.runs(1)
    [claimed] = await queue.claim(spec("dead", wait=0))
    assert claimed["id"] == stale_id
    assert await queue.claim(spec("first", wait=1)) == []  # the run is leased, not stale
    await seeded.expire_lease(stale_id)
    skipped = polls_without_statement(queue)
    assert await queue.claim(spec("within", wait=1)) == []  # waits its second out
    assert polls_without_statement(queue) == skipped + 1
    [run] = await asyncio.wait_for(queue.claim(spec("after", wait=1)), 5)
    assert (run["id"], run["attempt"], run["claim_owner"]) == (stale_id, 2, "after")


async def test_a_listener_reconnect_ends_the_trust_in_every_empty_look(
    queue: QueueService, seeded: SeededQueue
) -> None:
    """What opened while nobody listened is unknown: after a reconnect the next poll
    looks itself."""
    await seeded.definition()
    assert await queue.claim(spec("first", wait=1)) == []
    signal = queue._claims._signal
    assert signal is not None and signal.listening
    await seeded.conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = $1 AND datname = current_database()",
        LISTENER_APPLICATION_NAME,
    )
    # the run opens while the listener is down: its NOTIFY is lost
    run_id = await seeded.run()
    for _ in range(100):
        await asyncio.sleep(0.05)
        if signal.listening:
            break
    assert signal.listening
    skipped = polls_without_statement(queue)
    [run] = await asyncio.wait_for(queue.claim(spec("second", wait=1)), 5)
    assert run["id"] == run_id
    assert polls_without_statement(queue) == skipped
