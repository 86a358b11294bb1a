"""Close-outbox throughput with real fsyncs, against a same-run raw-write baseline.

    uv run python bench/outbox_throughput.py [--entries 500] [--dir PATH]

Prints three figures for N entries in a fresh temporary directory (on the file system of
--dir, default the system temp dir):

* baseline: the raw cost of one durable write (temp file, write, fsync, os.replace,
  directory fsync) of a file the size of one entry record, as writes/s;
* enqueue: `OutboxStore.enqueue_close` of N distinct closes, entries/s;
* replay: `replay_pending` of those N entries with a no-op callback, entries/s.

Each entry costs one durable write to enqueue and, to replay, two durable writes (the
attempt record, the delivered record) plus an unlink and directory fsync, so the ratios
to the baseline show the outbox's own overhead beyond its fsyncs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from ops_contracts import CloseDisposition
from rein_aharness.outbox import OutboxStore, replay_pending
from rein_aharness.outbox.record import OutboxRecord


def _result(index: int) -> dict[str, object]:
    return {
        "ok": True,
        "path": f"briefs/2026-01-{index % 28 + 1:02d}.md",
        "head_after": f"{index:040x}",
        "target_repo": "research/briefs",
        "committed": True,
        "evidence": {
            "request_id": f"req-{index}",
            "contract_version": "1.0",
            "profile_ref": "harness.agent-dev@1.0.0",
            "rein_id": "rein-aharness",
            "rein_version": "0.1.0",
            "resolved_model": "claude-sonnet-4-6",
            "sandbox_profile": "profile.bwrap-local",
            "outcome": "succeeded",
            "duration_s": 12.4,
            "tokens_spent": 321,
            "tool_events_count": 0,
            "tool_events_completeness": "unavailable",
        },
    }


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


def _round(base: Path, count: int) -> tuple[float, float, float, int]:
    """One round in a fresh directory: (baseline, enqueue, replay rates, record size)."""
    store = OutboxStore(base / "state" / "close-outbox")
    started = time.perf_counter()
    for index in range(count):
        store.enqueue_close(
            run_id=f"run-{index:06d}",
            transaction_id=f"txn-{index:06d}",
            worker_id="rein-aharness@bench",
            action="complete",
            result=_result(index),
        )
    enqueue_rate = count / (time.perf_counter() - started)
    sizes = [path.stat().st_size for path in store.paths.pending.iterdir()]
    record_size = sum(sizes) // len(sizes)

    started = time.perf_counter()
    report = anyio.run(replay_pending, store, _noop)
    replay_rate = count / (time.perf_counter() - started)
    assert report.count("delivered") == count

    raw = base / "raw"
    raw.mkdir()
    return _baseline(raw, record_size, count), enqueue_rate, replay_rate, record_size


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    parser.add_argument("--dir", type=Path, default=None, help="where to create the temp dir")
    args = parser.parse_args()
    count: int = args.entries

    rounds = []
    with tempfile.TemporaryDirectory(prefix="outbox-bench-", dir=args.dir) as tmp:
        for number in range(args.rounds):
            rounds.append(_round(Path(tmp) / f"round-{number}", count))
    baseline = statistics.median(r[0] for r in rounds)
    enqueue = statistics.median(r[1] for r in rounds)
    replay = statistics.median(r[2] for r in rounds)
    ratios_enqueue = statistics.median(r[1] / r[0] for r in rounds)
    ratios_replay = statistics.median(r[2] / r[0] for r in rounds)

    system = f"{platform.system()} {platform.release()}"
    print(f"platform: {system}, python {platform.python_version()}, dir: {tmp}")
    print(f"entries: {count} per round, rounds: {args.rounds} (medians), record: {rounds[0][3]} B")
    print(f"baseline durable write (write+fsync+replace+dir fsync): {baseline:8.1f} writes/s")
    print(
        f"enqueue with fsync:                                     {enqueue:8.1f} entries/s"
        f"  ({ratios_enqueue:.2f} x baseline)"
    )
    print(
        f"replay, no-op callback:                                 {replay:8.1f} entries/s"
        f"  ({ratios_replay:.2f} x baseline)"
    )
    print("(per entry: enqueue = 1 durable write; replay = 2 durable writes + unlink + dir fsync)")


if __name__ == "__main__":
    main()
