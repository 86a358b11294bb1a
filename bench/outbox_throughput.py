"""Close-outbox throughput with real fsyncs, against a same-run raw-write baseline.

    uv run python bench/outbox_throughput.py [--entries 500] [--rounds 3] [--group 64]
                                             [--dir PATH]

Prints, for N entries in fresh temporary directories (on the file system of --dir,
default the system temp dir), the median of the rounds:

* baseline: the raw cost of one durable write (temp file, write, fsync, os.replace,
  directory fsync) of a file the size of one entry record, as writes/s;
* enqueue: `OutboxStore.enqueue_close` of N distinct closes, entries/s;
* replay per entry: `replay_pending(group_size=1)` of those N entries with a no-op
  callback, entries/s: each entry pays its own attempt write, delivered write, unlink
  and their fsyncs (five);
* replay grouped: `replay_pending(group_size=--group)` of another N entries, entries/s:
  a group's attempts share one flush, and so do its deliveries (outbox/replay.py);
* the ratio of the two replays, measured in the same round.

Each replay starts from a store opened afresh, as a restarted worker's would, so every
record is read and validated from disk. The sync calls each replay made are counted
(wrapping `os.fsync` and the outbox's `syncfs` in this process) and shown per entry.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ops_contracts import CloseDisposition
from ops_testsupport.factories import gateway_result, glas_evidence
from rein_aharness.outbox import OutboxStore, durable, replay_pending
from rein_aharness.outbox.record import OutboxRecord
from rein_aharness.outbox.replay import GROUP_SIZE


def _result(index: int) -> dict[str, object]:
    return gateway_result(
        path=f"briefs/2026-01-{index % 28 + 1:02d}.md",
        head_after=f"{index:040x}",
        target_repo="research/briefs",
        committed=True,
        evidence=glas_evidence(request_id=f"req-{index}"),
    )


def _baseline(directory: Path, size: int, count: int) -> float:
    payload = os.urandom(size)
    started = time.perf_counter()
    for index in range(count):
        temp = directory / f".tmp-{index}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, directory / f"{index}.json")
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return count / (time.perf_counter() - started)


async def _noop(record: OutboxRecord) -> CloseDisposition:
    return CloseDisposition.applied


@dataclass
class SyncCounts:
    fsync: int = 0
    syncfs: int = 0


@contextmanager
def _counting_syncs() -> Iterator[SyncCounts]:
    counts = SyncCounts()
    real_fsync, real_syncfs = os.fsync, durable.syncfs

    def fsync(fd: Any) -> None:
        counts.fsync += 1
        real_fsync(fd)

    def syncfs(fd: int) -> bool:
        counts.syncfs += 1
        return real_syncfs(fd)

    os.fsync, durable.syncfs = fsync, syncfs
    try:
        yield counts
    finally:
        os.fsync, durable.syncfs = real_fsync, real_syncfs


def _enqueue(root: Path, count: int) -> float:
    store = OutboxStore(root)
    started = time.perf_counter()
    for index in range(count):
        store.enqueue_close(
            run_id=f"run-{index:06d}",
            transaction_id=f"txn-{index:06d}",
            worker_id="rein-aharness@bench",
            action="complete",
            result=_result(index),
        )
    return count / (time.perf_counter() - started)


def _replay(root: Path, count: int, group_size: int) -> tuple[float, SyncCounts]:
    store = OutboxStore(root)  # opened afresh, as after a restart
    replay: Callable[[], Any] = lambda: replay_pending(store, _noop, group_size=group_size)  # noqa: E731
    with _counting_syncs() as counts:
        started = time.perf_counter()
        report = anyio.run(replay)
        rate = count / (time.perf_counter() - started)
    assert report.count("delivered") == count
    assert store.snapshot().pending == ()
    return rate, counts


@dataclass
class Round:
    baseline: float
    enqueue: float
    per_entry: float
    grouped: float
    per_entry_syncs: SyncCounts
    grouped_syncs: SyncCounts
    record_size: int


def _round(base: Path, count: int, group_size: int) -> Round:
    """One round in fresh directories."""
    enqueue_rate = _enqueue(base / "one" / "close-outbox", count)
    pending = base / "one" / "close-outbox" / "pending"
    sizes = [path.stat().st_size for path in pending.iterdir()]
    record_size = sum(sizes) // len(sizes)
    per_entry, per_entry_syncs = _replay(base / "one" / "close-outbox", count, 1)
    _enqueue(base / "two" / "close-outbox", count)
    grouped, grouped_syncs = _replay(base / "two" / "close-outbox", count, group_size)
    raw = base / "raw"
    raw.mkdir()
    return Round(
        _baseline(raw, record_size, count),
        enqueue_rate,
        per_entry,
        grouped,
        per_entry_syncs,
        grouped_syncs,
        record_size,
    )


def _syncs(counts: SyncCounts, count: int) -> str:
    text = f"{counts.fsync / count:.2f} fsync"
    if counts.syncfs:
        text += f" + {counts.syncfs / count:.3f} syncfs"
    return text + " per entry"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    parser.add_argument("--group", type=int, default=GROUP_SIZE, help="entries per flush")
    parser.add_argument("--dir", type=Path, default=None, help="where to create the temp dir")
    args = parser.parse_args()
    count: int = args.entries

    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="outbox-bench-", dir=args.dir) as tmp:
        for number in range(args.rounds):
            rounds.append(_round(Path(tmp) / f"round-{number}", count, args.group))

    def median(value: Callable[[Round], float]) -> float:
        return statistics.median(value(r) for r in rounds)

    baseline = median(lambda r: r.baseline)
    middle = sorted(rounds, key=lambda r: r.grouped)[len(rounds) // 2]

    def line(label: str, rate: float, unit: str, note: str = "") -> None:
        print(f"{label + ':':<52} {rate:8.1f} {unit}{note}")

    def ratio(value: Callable[[Round], float]) -> str:
        return f"{median(lambda r: value(r) / r.baseline):.2f} x baseline"

    system = f"{platform.system()} {platform.release()}"
    print(f"platform: {system}, python {platform.python_version()}, dir: {tmp}")
    print(
        f"entries: {count} per round, rounds: {args.rounds} (medians), "
        f"record: {rounds[0].record_size} B, group: {args.group}"
    )
    line("baseline durable write (write+fsync+replace+dir fsync)", baseline, "writes/s")
    line(
        "enqueue with fsync",
        median(lambda r: r.enqueue),
        "entries/s",
        f"  ({ratio(lambda r: r.enqueue)})",
    )
    line(
        "replay per entry, no-op callback",
        median(lambda r: r.per_entry),
        "entries/s",
        f"  ({ratio(lambda r: r.per_entry)}; {_syncs(middle.per_entry_syncs, count)})",
    )
    line(
        f"replay grouped ({args.group} per flush), no-op callback",
        median(lambda r: r.grouped),
        "entries/s",
        f"  ({ratio(lambda r: r.grouped)}; {_syncs(middle.grouped_syncs, count)})",
    )
    print(
        f"{'grouped / per entry (same round):':<52} "
        f"{median(lambda r: r.grouped / r.per_entry):8.2f} x"
    )


if __name__ == "__main__":
    main()
