"""Two processes replaying one store never run the same entry's callback at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rein_aharness.outbox import OutboxStore

CHILD = Path(__file__).parents[1] / "concurrent_child.py"


def _enqueue(store: OutboxStore, count: int) -> set[str]:
    return {
        store.enqueue_close(
            run_id=f"run-{index}",
            transaction_id="txn",
            worker_id="rein-aharness@concurrent",
            action="complete",
            result={"ok": True},
        ).record.key
        for index in range(count)
    }


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The outbox's root, the children's markers directory (made) and their start line
    (a file, not there yet)."""
    markers = tmp_path / "markers"
    markers.mkdir()
    return tmp_path / "close-outbox", markers, tmp_path / "go"


def _start(root: Path, markers: Path, go: Path, pause: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(root), str(markers), str(go), str(pause)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.timeout(120)
def test_two_replaying_processes_never_overlap_on_an_entry(tmp_path: Path) -> None:
    root, markers, go = _layout(tmp_path)
    store = OutboxStore(root)
    keys = _enqueue(store, 8)
    children = [_start(root, markers, go, 0.05) for _ in range(2)]
    time.sleep(1.0)  # let both import and wait at the start line
    go.touch()
    for child in children:
        _, stderr = child.communicate(timeout=60)
        assert child.returncode == 0, stderr.decode()
    assert sorted(markers.glob("overlap-*")) == []
    calls = [line.split()[0] for line in (markers / "calls.log").read_text().splitlines()]
    # The second replayer waited for the first pass and found nothing left to deliver.
    assert sorted(calls) == sorted(keys)
    assert store.snapshot().delivered_count == 8
    assert list(store.paths.pending.iterdir()) == []


@pytest.mark.timeout(60)
def test_enqueue_and_status_are_not_held_up_by_a_slow_delivery_elsewhere(tmp_path: Path) -> None:
    root, markers, go = _layout(tmp_path)
    go.touch()
    store = OutboxStore(root)
    _enqueue(store, 1)
    child = _start(root, markers, go, 3.0)
    try:
        deadline = time.monotonic() + 30
        while not list(markers.glob("*.inflight")):
            assert time.monotonic() < deadline, "the child never entered its callback"
            time.sleep(0.01)
        started = time.monotonic()
        store.enqueue_close(
            run_id="while-delivering",
            transaction_id="txn",
            worker_id="rein-aharness@concurrent",
            action="complete",
            result={"ok": True},
        )
        assert time.monotonic() - started < 1.0
        # Opening the store and reading its status do not wait for the pass either.
        started = time.monotonic()
        snapshot = OutboxStore(root).snapshot()
        assert time.monotonic() - started < 1.0
        assert len(snapshot.pending) == 2
        assert list(markers.glob("*.inflight")), "the callback was still running"
    finally:
        child.communicate(timeout=30)
    assert child.returncode == 0
