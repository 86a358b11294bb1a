"""Replay by groups (group commit, outbox/replay.py): the same rules, fewer flushes.

The crash-injection suite kills a grouped replay at every step (test_rein_outbox_crash.py);
these tests hold the grouped path to the entry-by-entry one while nothing crashes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from ops_contracts import CloseDisposition, RefusalCode
from rein_aharness.outbox import ConclusiveRefusalError, OutboxStore, durable, replay_pending
from rein_aharness.outbox.record import OutboxRecord

Factory = Callable[..., dict[str, Any]]


def _pending_attempts(store: OutboxStore) -> dict[str, int]:
    return {
        json.loads(path.read_bytes())["run_id"]: json.loads(path.read_bytes())["attempts"]
        for path in store.paths.pending.iterdir()
    }


def _enqueue(store: OutboxStore, make_close: Factory, count: int, clock: Any) -> list[str]:
    keys = []
    for index in range(count):
        keys.append(store.enqueue_close(**make_close(run_id=f"run-{index}")).record.key)
        clock.advance(seconds=1)  # delivery order is age order
    return keys


def test_every_attempt_of_a_group_is_durable_before_its_first_callback(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    _enqueue(store, make_close, 3, clock)
    seen: list[dict[str, int]] = []

    async def deliver(record: OutboxRecord) -> CloseDisposition:
        seen.append(_pending_attempts(store))
        return CloseDisposition.applied

    report = anyio.run(lambda: replay_pending(store, deliver, group_size=3))
    assert report.count("delivered") == 3
    assert seen[0] == {"run-0": 1, "run-1": 1, "run-2": 1}
    # Nothing is moved until the group is committed, and then all of it.
    assert seen[2] == seen[0]
    assert list(store.paths.pending.iterdir()) == []
    assert store.snapshot().delivered_count == 3


OUTCOMES: list[object] = [
    CloseDisposition.applied,
    RuntimeError("down"),
    ConclusiveRefusalError(RefusalCode.terminal_conflict),
    CloseDisposition.reconciled,
    None,
    ValueError("bad"),
    CloseDisposition.applied,
]


def _end_state(store: OutboxStore) -> dict[str, Any]:
    def records(directory: Path) -> dict[str, tuple[Any, ...]]:
        found = {}
        for path in directory.iterdir():
            if path.name.endswith(".reason.json"):
                continue
            value = json.loads(path.read_bytes())
            found[value["run_id"]] = (
                value["state"],
                value["attempts"],
                value["last_failure"],
                value["disposition"],
            )
        return found

    return {
        "pending": records(store.paths.pending),
        "delivered": records(store.paths.delivered),
        "quarantine": records(store.paths.quarantine),
    }


def _pass(store: OutboxStore, group_size: int) -> tuple[Any, ...]:
    answers: Iterator[object] = iter(OUTCOMES)

    async def deliver(record: OutboxRecord) -> CloseDisposition | None:
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        assert answer is None or isinstance(answer, CloseDisposition)
        return answer

    report = anyio.run(lambda: replay_pending(store, deliver, group_size=group_size))
    outcomes = [(o.run_id, o.outcome, o.detail) for o in report.outcomes]
    return _end_state(store), outcomes, store.snapshot().lost


@pytest.mark.parametrize("group_size", [2, 3, 64])
def test_a_grouped_pass_ends_where_an_entry_by_entry_pass_does(
    outbox_root: Path, tmp_path: Path, make_close: Factory, clock: Any, group_size: int
) -> None:
    one_by_one = OutboxStore(outbox_root, clock=clock)
    _enqueue(one_by_one, make_close, len(OUTCOMES), clock)
    grouped = OutboxStore(tmp_path / "grouped" / "close-outbox", clock=clock)
    _enqueue(grouped, make_close, len(OUTCOMES), clock)
    expected = _pass(one_by_one, 1)
    assert _pass(grouped, group_size) == expected
    state, _, lost = expected
    assert sorted(state["delivered"]) == ["run-0", "run-3", "run-4", "run-6"]
    failure = {"exception_class": "RuntimeError", "marker": "delivery_failed"}
    assert state["pending"]["run-1"][1:3] == (1, failure)
    assert list(state["quarantine"]) == ["run-2"] and lost == ()


def test_a_pass_stopped_mid_group_leaves_the_rest_uncounted(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    _enqueue(store, make_close, 4, clock)
    calls: list[str] = []

    async def deliver(record: OutboxRecord) -> CloseDisposition:
        calls.append(record.run_id)
        if record.run_id == "run-1":
            raise ConnectionError("unreachable")
        return CloseDisposition.applied

    report = anyio.run(
        lambda: replay_pending(store, deliver, group_size=4, stop_on=(ConnectionError,))
    )
    assert report.stopped_early and calls == ["run-0", "run-1"]
    assert store.snapshot().delivered_count == 1
    # The attempts counted for run-2 and run-3 before the group began were undone.
    assert _pending_attempts(store) == {"run-1": 1, "run-2": 0, "run-3": 0}


async def test_a_cancelled_group_commits_what_it_knows_first(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    _enqueue(store, make_close, 3, clock)
    hanging = anyio.Event()

    async def deliver(record: OutboxRecord) -> CloseDisposition:
        if record.run_id == "run-1":
            hanging.set()
            await anyio.sleep_forever()
        return CloseDisposition.applied

    async with anyio.create_task_group() as group:
        group.start_soon(lambda: replay_pending(store, deliver, group_size=3))
        await hanging.wait()
        group.cancel_scope.cancel()
    # run-0 was delivered before the cancellation: it is not sent again.
    assert store.snapshot().delivered_count == 1
    # run-1 was being sent: its attempt stays counted; run-2 was never sent.
    assert _pending_attempts(store) == {"run-1": 1, "run-2": 0}


def test_a_pending_file_replaced_during_the_group_is_read_again_not_overwritten(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    keys = _enqueue(store, make_close, 2, clock)
    second = store.paths.pending / f"{keys[1]}.json"

    async def deliver(record: OutboxRecord) -> CloseDisposition:
        if record.run_id == "run-0":
            # Someone rewrites the second entry (same bytes, another file) meanwhile.
            data = second.read_bytes()
            second.unlink()
            second.write_bytes(data)
        return CloseDisposition.applied

    report = anyio.run(lambda: replay_pending(store, deliver, group_size=2))
    assert report.count("delivered") == 2
    assert list(store.paths.pending.iterdir()) == []
    delivered = json.loads((store.paths.delivered / f"{keys[1]}.json").read_bytes())
    assert (delivered["state"], delivered["attempts"]) == ("delivered", 1)


def test_a_group_costs_a_few_flushes_not_five_fsyncs_per_entry(
    store: OutboxStore, make_close: Factory, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What makes replay fast (bench/outbox_throughput.py measures it): per group, one
    flush for its attempts and one for its deliveries, and an fsync per directory."""
    _enqueue(store, make_close, 20, clock)
    calls = {"fsync": 0, "syncfs": 0, "syncfs unavailable": 0}
    real_fsync, real_syncfs = os.fsync, durable.syncfs

    def fsync(fd: int) -> None:
        calls["fsync"] += 1
        real_fsync(fd)

    def syncfs(fd: int) -> bool:
        calls["syncfs"] += 1
        flushed = real_syncfs(fd)
        calls["syncfs unavailable"] += not flushed
        return flushed

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(durable, "syncfs", syncfs)

    async def applied(record: OutboxRecord) -> CloseDisposition:
        return CloseDisposition.applied

    report = anyio.run(lambda: replay_pending(store, applied, group_size=10))
    assert report.count("delivered") == 20
    groups = 2
    # attempts: pending/; deliveries: delivered/, then pending/ after the removals
    assert calls["syncfs"] == 2 * groups
    # where the system has no syncfs, each file of a flushed group is fsynced instead
    flushed_by_file = 10 * calls["syncfs unavailable"]
    assert calls["fsync"] == 3 * groups + flushed_by_file
