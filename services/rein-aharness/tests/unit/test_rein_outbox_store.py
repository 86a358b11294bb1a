"""Identity: one entry per run + transaction, identical re-enqueue, refused conflicts."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from ops_contracts import CloseDisposition, RefusalCode, canonical_json
from rein_aharness.outbox import (
    ConclusiveRefusalError,
    OutboxConflictError,
    OutboxStore,
    entry_key,
    replay_pending,
)
from rein_aharness.outbox.record import RECORD_FORMAT, OutboxRecord

Factory = Callable[..., dict[str, Any]]


async def _applied(record: OutboxRecord) -> CloseDisposition:
    return CloseDisposition.applied


def _deliver_all(store: OutboxStore) -> None:
    anyio.run(replay_pending, store, _applied)


def test_enqueue_writes_one_pending_record(store: OutboxStore, make_close: Factory) -> None:
    result = store.enqueue_close(**make_close())
    assert result.state == "pending" and result.created
    record = result.record
    path = store.paths.pending / f"{record.key}.json"
    on_disk = json.loads(path.read_bytes())
    assert path.read_bytes() == canonical_json(on_disk)
    assert on_disk["format"] == RECORD_FORMAT
    assert on_disk["state"] == "pending"
    assert on_disk["attempts"] == 0
    assert on_disk["key"] == entry_key(record.run_id, record.transaction_id)
    assert on_disk["intent"]["worker_id"] == "rein-aharness@railiance01"
    assert on_disk["created_at"] == "2026-01-01T12:00:00Z"


def test_identical_reenqueue_returns_the_existing_pending_state(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    first = store.enqueue_close(**make_close())
    path = store.paths.pending / f"{first.record.key}.json"
    before = os.stat(path)
    clock.advance(minutes=5)
    # A raw result that normalizes to the same evidence is the same intent.
    again = store.enqueue_close(**make_close(result={**make_close()["result"], "tool_output": "x"}))
    assert again.state == "pending" and not again.created
    assert again.record == first.record
    after = os.stat(path)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_identical_reenqueue_keeps_the_attempt_count(
    store: OutboxStore, make_close: Factory
) -> None:
    store.enqueue_close(**make_close())

    async def broken(record: OutboxRecord) -> CloseDisposition:
        raise ConnectionError("down")

    anyio.run(replay_pending, store, broken)
    again = store.enqueue_close(**make_close())
    assert again.state == "pending" and again.record.attempts == 1


def test_identical_reenqueue_returns_the_existing_delivered_state(
    store: OutboxStore, make_close: Factory
) -> None:
    store.enqueue_close(**make_close())
    _deliver_all(store)
    again = store.enqueue_close(**make_close())
    assert again.state == "delivered" and not again.created
    assert again.record.disposition is CloseDisposition.applied
    assert list(store.paths.pending.iterdir()) == []


def test_a_close_settled_as_cancelled_is_read_back_as_delivered(
    store: OutboxStore, make_close: Factory
) -> None:
    created = store.enqueue_close(**make_close())
    assert store.begin_attempt(created.record.key) is not None
    store.mark_delivered(created.record.key, "cancelled")
    again = store.enqueue_close(**make_close())
    assert again.state == "delivered" and not again.created
    assert again.record.disposition == "cancelled"
    snapshot = store.snapshot()
    assert (snapshot.pending, snapshot.quarantined, snapshot.delivered_count) == ((), (), 1)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"worker_id": "rein-aharness@other"}, "worker_id"),
        ({"action": "fail", "result": None, "error": "boom"}, "action"),
        ({"result": {"ok": False}}, "result"),
    ],
)
@pytest.mark.parametrize("settled", ["pending", "delivered"])
def test_a_different_complete_under_the_same_identity_is_refused(
    store: OutboxStore,
    make_close: Factory,
    overrides: dict[str, Any],
    field: str,
    settled: str,
) -> None:
    store.enqueue_close(**make_close())
    if settled == "delivered":
        _deliver_all(store)
    before = sorted(store.paths.root.rglob("*.json"))
    with pytest.raises(OutboxConflictError) as caught:
        store.enqueue_close(**make_close(**overrides))
    assert caught.value.state == settled
    assert field in caught.value.fields
    assert sorted(store.paths.root.rglob("*.json")) == before


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"error": "a different error"}, "error"),
        ({"reopen": True}, "reopen"),
        ({"result": {"ok": False}}, "result"),
        ({"worker_id": "someone@else"}, "worker_id"),
    ],
)
def test_a_different_failure_under_the_same_identity_is_refused(
    store: OutboxStore, make_fail: Factory, overrides: dict[str, Any], field: str
) -> None:
    store.enqueue_close(**make_fail())
    with pytest.raises(OutboxConflictError) as caught:
        store.enqueue_close(**make_fail(**overrides))
    assert caught.value.fields == (field,)
    # The message names fields, never values.
    assert "a different error" not in str(caught.value)


def test_other_transactions_of_the_same_run_are_separate_entries(
    store: OutboxStore, make_close: Factory, make_fail: Factory
) -> None:
    a = store.enqueue_close(**make_close(transaction_id="txn-a"))
    b = store.enqueue_close(**make_close(transaction_id="txn-b", result={"ok": False}))
    c = store.enqueue_close(**make_fail(transaction_id=None))
    assert len({a.record.key, b.record.key, c.record.key}) == 3
    assert len(list(store.paths.pending.iterdir())) == 3


def test_reenqueue_of_a_quarantined_identity_reports_it(
    store: OutboxStore, make_close: Factory
) -> None:
    store.enqueue_close(**make_close())

    async def refused(record: OutboxRecord) -> CloseDisposition:
        raise ConclusiveRefusalError(RefusalCode.terminal_conflict)

    anyio.run(replay_pending, store, refused)
    again = store.enqueue_close(**make_close())
    assert again.state == "quarantined" and not again.created
    with pytest.raises(OutboxConflictError) as caught:
        store.enqueue_close(**make_close(result={"ok": False}))
    assert caught.value.state == "quarantined"
    assert list(store.paths.pending.iterdir()) == []


def test_an_unreadable_quarantined_record_does_not_block_a_new_intent(
    store: OutboxStore, make_close: Factory
) -> None:
    key = entry_key(make_close()["run_id"], make_close()["transaction_id"])
    (store.paths.quarantine / f"{key}.json").write_bytes(b"{torn")
    result = store.enqueue_close(**make_close())
    assert result.state == "pending" and result.created
    assert (store.paths.quarantine / f"{key}.json").read_bytes() == b"{torn"


def test_an_unreadable_record_under_the_key_is_quarantined_intact_before_enqueue(
    store: OutboxStore, make_close: Factory
) -> None:
    key = entry_key(make_close()["run_id"], make_close()["transaction_id"])
    (store.paths.pending / f"{key}.json").write_bytes(b"\x00garbage")
    result = store.enqueue_close(**make_close())
    assert result.created
    assert (store.paths.quarantine / f"{key}.json").read_bytes() == b"\x00garbage"
    sidecar = json.loads((store.paths.quarantine / f"{key}.reason.json").read_bytes())
    assert sidecar["reason"] == "unparsable"


def test_snapshot_lists_pending_and_quarantined_and_counts_delivered(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    store.enqueue_close(**make_close(run_id="run-delivered"))
    _deliver_all(store)
    clock.advance(seconds=10)
    store.enqueue_close(**make_close(run_id="run-pending"))
    (store.paths.pending / "stray.txt").write_text("not an entry")
    (store.paths.pending / ".tmp-deadbeef").write_text("half written")
    clock.advance(seconds=5)
    snapshot = store.snapshot()
    assert snapshot.delivered_count == 1
    assert [entry.run_id for entry in snapshot.pending] == ["run-pending", None]
    assert snapshot.pending[0].attempts == 0
    assert snapshot.pending[0].action == "complete"
    assert snapshot.pending[1].reason == "unexpected_name"
    assert snapshot.quarantined == ()
    # status is read-only: the odd file is still where it was
    assert (store.paths.pending / "stray.txt").exists()


def test_store_paths_are_stable(outbox_root: Path) -> None:
    store = OutboxStore(outbox_root)
    assert store.paths.pending == outbox_root / "pending"
    assert store.paths.delivered == outbox_root / "delivered"
    assert store.paths.quarantine == outbox_root / "quarantine"
