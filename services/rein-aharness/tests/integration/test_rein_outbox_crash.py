"""Crash injection: a child enqueuing or replaying is SIGKILLed at every durable step.

For each operation the child is first run to completion to count the calls of each
step function; then one child per (step, call number, before/after) is killed at that
point, and the store it leaves behind is checked and recovered. Together the points
cover every step the outbox takes:

* after the temp write (killed before the first fsync of a write),
* after the file fsync (before the replace),
* after the replace (before the directory fsync),
* after the attempt record (after the directory fsync of `begin_attempt`),
* inside the callback,
* and the unlink/rename of the delivered and quarantine moves;

and, for a replay by groups (`MODE@GROUP`: three entries in groups of two and one, or
one group of three), the same steps of the group commit: between the temp writes and
the one flush (`syncfs`) of a group, between the flush and the renames, between the
renames, after the delivered records and before the pending ones are removed, and while
the attempts of entries whose callback never ran are undone (`stopping`).

SIGKILL loses no page cache, so this checks the outbox's logical crash consistency
(order of steps, commit points, recovery), not the disk's power-loss behaviour.

Checked after every kill: every record in pending/ and delivered/ is valid (none torn);
no acknowledged entry is lost; stray temp files are not entries; nothing valid is
quarantined; the ledger knows every acknowledged entry that is still pending (no missed
one) and opening the store finds nothing lost (no false alarm); after a recovery replay
every entry has ended where it belongs, exactly once, the ledger knows nothing pending,
and no entry's callback ran more often than its recorded attempts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from crash_child import enqueue_three

from ops_contracts import CloseDisposition, RefusalCode
from rein_aharness.outbox import ConclusiveRefusalError, OutboxStore, entry_key, replay_pending
from rein_aharness.outbox.durable import is_temp_name
from rein_aharness.outbox.ledger import read_ledger
from rein_aharness.outbox.record import OutboxRecord, parse_record

CHILD = Path(__file__).parents[1] / "crash_child.py"
MODES = (
    "enqueue",
    "replay",
    "failing",
    "refused",
    "stopping",
    "replay@2",
    "replay@3",
    "failing@2",
    "refused@2",
    "stopping@3",
)
ALL_KEYS = {entry_key(f"run-{index}", "txn") for index in range(3)}
TARGETS = ("fsync", "replace", "rename", "unlink", "syncfs")


def _seed(root: Path) -> set[str]:
    return set(enqueue_three(OutboxStore(root)))


def _run_child(
    mode: str, root: Path, target: str, when: str, n: int
) -> tuple[int, list[str], Path]:
    log = root.parent / "callback.log"
    completed = subprocess.run(
        [sys.executable, str(CHILD), mode, str(root), target, when, str(n), str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if completed.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed: {completed.returncode}\n{completed.stderr}")
    return completed.returncode, completed.stdout.splitlines(), log


def _base_mode(mode: str) -> str:
    return mode.partition("@")[0]


def _count_calls(mode: str, base: Path) -> dict[str, int]:
    root = base / "count" / "close-outbox"
    if mode != "enqueue":
        _seed(root)
    code, lines, _ = _run_child(mode, root, "count", "before", 0)
    assert code == 0
    counts = json.loads(lines[-1])
    assert isinstance(counts, dict)
    return counts


def _records(directory: Path, state: str) -> dict[str, OutboxRecord]:
    records = {}
    for path in directory.iterdir():
        if is_temp_name(path.name):
            continue
        # parse_record raises on anything torn, renamed or mismatched.
        record = parse_record(path.read_bytes(), name=path.name, state=state)  # type: ignore[arg-type]
        records[record.key] = record
    return records


def _quarantined(root: Path) -> dict[str, dict[str, Any]]:
    """Quarantined entries by name, with their sidecars."""
    directory = root / "quarantine"
    entries = {}
    for path in directory.iterdir():
        if is_temp_name(path.name) or path.name.endswith(".reason.json"):
            continue
        sidecar = directory / (path.name[: -len(".json")] + ".reason.json")
        entries[path.name] = json.loads(sidecar.read_bytes())
    return entries


def _check_and_recover(
    mode: str, root: Path, acknowledged: set[str], seeded: set[str], log: Path
) -> None:
    mode = _base_mode(mode)
    pending = _records(root / "pending", "pending")
    delivered = _records(root / "delivered", "delivered")
    quarantined = _quarantined(root)
    expected = acknowledged | seeded
    present = set(pending) | set(delivered) | {name[:64] for name in quarantined}
    assert expected <= present, "an acknowledged entry was lost"
    assert present <= ALL_KEYS, "an entry appeared that nobody enqueued"
    settled = set(delivered) | {name[:64] for name in quarantined}
    known = read_ledger(root / "ledger").known
    assert expected - settled <= known, "the ledger missed an acknowledged pending entry"
    if mode != "refused":
        assert quarantined == {}, "a valid entry was quarantined"
    else:
        for sidecar in quarantined.values():
            assert sidecar["reason"] == "conclusive_refusal"
    store = OutboxStore(root)  # refuses an outbox that lost an entry: no false alarm
    # status never counts a temp file as an entry
    snapshot = store.snapshot()
    assert snapshot.lost == ()
    assert all(entry.reason is None for entry in snapshot.pending)
    assert len(snapshot.pending) + snapshot.delivered_count + len(snapshot.quarantined) == len(
        present
    )
    log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    async def recover(record: OutboxRecord) -> CloseDisposition:
        os.write(log_fd, f"{record.key}\n".encode())
        if mode == "refused":
            raise ConclusiveRefusalError(RefusalCode.terminal_conflict)
        return CloseDisposition.applied

    try:
        anyio.run(replay_pending, store, recover)
    finally:
        os.close(log_fd)
    assert not any(is_temp_name(p.name) for p in root.rglob("*")), "stray temp file left"
    assert list((root / "pending").iterdir()) == []
    assert read_ledger(root / "ledger").known == frozenset()
    assert store.snapshot().lost == ()
    calls: dict[str, int] = {}
    if log.exists():
        for key in log.read_text().split():
            calls[key] = calls.get(key, 0) + 1
    if mode == "refused":
        final = _quarantined(root)
        assert sorted(name[:64] for name in final) == sorted(present)
        assert len(final) == len(present), "an entry was quarantined twice"
        attempts = {
            name[:64]: json.loads((root / "quarantine" / name).read_bytes())["attempts"]
            for name in final
        }
    else:
        assert _quarantined(root) == {}
        final_records = _records(root / "delivered", "delivered")
        assert set(final_records) == present
        attempts = {key: record.attempts for key, record in final_records.items()}
    for key, count in calls.items():
        assert count <= attempts[key], "a callback ran without a recorded attempt"


def _points(counts: dict[str, int]) -> list[tuple[str, str, int]]:
    points = [
        (target, when, n)
        for target in TARGETS
        for when in ("before", "after")
        for n in range(1, counts[target] + 1)
    ]
    points += [("callback", "before", n) for n in range(1, counts["callback"] + 1)]
    return points


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", MODES)
def test_killed_at_every_step_the_store_stays_consistent(mode: str, tmp_path: Path) -> None:
    counts = _count_calls(mode, tmp_path)
    points = _points(counts)
    base, _, group = mode.partition("@")
    if base == "enqueue":
        # the entry (file and directory) and its ledger line, for each of three
        assert counts["fsync"] >= 9 and counts["replace"] == 3
    elif base == "stopping":
        assert counts["callback"] == 1  # the first failure ends the pass
    elif not group:
        assert counts["callback"] == 3 and counts["fsync"] >= 12
    else:
        groups = -(-3 // int(group))
        assert counts["callback"] == 3
        if base == "replay":  # per group: attempts flushed, then deliveries flushed
            assert counts["syncfs"] == 2 * groups

    def one(point: tuple[str, str, int]) -> None:
        target, when, n = point
        root = tmp_path / f"{target}-{when}-{n}" / "close-outbox"
        seeded = _seed(root) if mode != "enqueue" else set()
        code, lines, log = _run_child(mode, root, target, when, n)
        assert code == -signal.SIGKILL, f"{point} was not reached"
        acknowledged = {line for line in lines if len(line) == 64}
        _check_and_recover(mode, root, acknowledged, seeded, log)

    with ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(one, point) for point in points]:
            future.result()
    assert len(points) >= 10
