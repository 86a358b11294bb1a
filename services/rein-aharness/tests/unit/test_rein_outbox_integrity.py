"""A pending close never disappears silently: the outbox knows which outbox it is
(outbox/identity.py) and which entries it holds (outbox/ledger.py)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import stat
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from ops_contracts import CloseDisposition, RefusalCode
from rein_aharness.cli import main
from rein_aharness.operator.exit_codes import ExitCode
from rein_aharness.outbox import (
    ConclusiveRefusalError,
    OutboxIntegrityError,
    OutboxReplacedError,
    OutboxStore,
    Retention,
    replay_pending,
)
from rein_aharness.outbox.ledger import read_ledger
from rein_aharness.outbox.record import OutboxRecord
from rein_worker_kit import cli_environment

# `run` configures the `rein_aharness` logger for the process; undone per test
pytestmark = pytest.mark.usefixtures("restore_logging")

Factory = Callable[..., dict[str, Any]]
WORKER = "rein-aharness@integrity01"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    cli_environment(monkeypatch, tmp_path, WORKER, REIN_AHARNESS_STATE_DIR=str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def root(environment: Path) -> Path:
    return environment / "close-outbox"


async def _applied(record: OutboxRecord) -> CloseDisposition:
    return CloseDisposition.applied


def _enqueue(store: OutboxStore, make_close: Factory, *runs: str) -> list[str]:
    return [store.enqueue_close(**make_close(run_id=run)).record.key for run in runs]


def _status(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = main(["close-outbox", "status", "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else {}, captured.err


def _run_refused(capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["run", "--once"]) == ExitCode.INTEGRITY
    assert int(ExitCode.INTEGRITY) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("rein-aharness: close outbox refused: ")
    return err


# -- the marker and the pin ---------------------------------------------------------------


def test_a_new_outbox_records_its_worker_identity_and_a_random_id_twice(
    root: Path, tmp_path: Path
) -> None:
    store = OutboxStore(root, identity=WORKER)
    marker = json.loads((root / "outbox.json").read_bytes())
    assert marker["format"] == "rein-aharness/close-outbox-marker/v1"
    assert marker["worker_id"] == WORKER
    assert re.fullmatch(r"[0-9a-f]{32}", marker["outbox_id"])
    assert store.marker.outbox_id == marker["outbox_id"]
    pin = root.parent / "close-outbox.id"
    assert pin.read_bytes() == (root / "outbox.json").read_bytes()
    for path in (pin, root / "outbox.json", root / "ledger"):
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600, path
    other = OutboxStore(tmp_path / "other" / "close-outbox")
    assert other.marker.outbox_id != store.marker.outbox_id
    # Reopening (under any identity) keeps them.
    assert OutboxStore(root, identity="someone@else").marker == store.marker


def test_opening_under_another_identity_is_logged_not_refused(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    OutboxStore(root, identity=WORKER)
    with caplog.at_level(logging.WARNING, "rein_aharness"):
        OutboxStore(root, identity="rein-aharness@renamed")
    assert any(WORKER in record.getMessage() for record in caplog.records)


def test_a_replaced_outbox_directory_is_refused(
    root: Path, tmp_path: Path, make_close: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    original = OutboxStore(root)
    _enqueue(original, make_close, "run-a")
    impostor = OutboxStore(tmp_path / "elsewhere" / "close-outbox")
    shutil.move(root, tmp_path / "moved-away")
    shutil.move(impostor.paths.root, root)
    with pytest.raises(OutboxReplacedError) as caught:
        OutboxStore(root)
    message = str(caught.value)
    assert message.startswith(f"{root}: is outbox {impostor.marker.outbox_id}, but ")
    assert original.marker.outbox_id in message and "close-outbox adopt" in message
    code, report, err = _status(capsys)
    assert (code, report) == (ExitCode.INTEGRITY, {})
    assert err.count("\n") == 1 and impostor.marker.outbox_id in err
    assert original.marker.outbox_id in _run_refused(capsys)


@pytest.mark.parametrize("damage", ["delete", "garble"])
def test_an_outbox_without_its_marker_is_refused(
    root: Path, make_close: Factory, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = OutboxStore(root)
    _enqueue(store, make_close, "run-a")
    if damage == "delete":
        (root / "outbox.json").unlink()
        expected = f"{root}: has no identity marker (outbox.json), but "
    else:
        (root / "outbox.json").write_text('{"outbox_id": "x"}')
        expected = f"{root / 'outbox.json'}: not an outbox marker this code wrote"
    with pytest.raises(OutboxReplacedError, match=re.escape(expected)):
        OutboxStore(root)
    assert _status(capsys)[0] == ExitCode.INTEGRITY
    assert expected in _run_refused(capsys)


def test_an_emptied_outbox_directory_is_refused(
    root: Path, make_close: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    store = OutboxStore(root)
    _enqueue(store, make_close, "run-a", "run-b")
    for path in root.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    with pytest.raises(OutboxReplacedError, match="has no identity marker"):
        OutboxStore(root)
    assert "replaced or emptied" in _run_refused(capsys)
    assert sorted(path.name for path in root.iterdir()) == []  # nothing recreated over it


def test_a_removed_outbox_is_refused_not_silently_recreated(
    root: Path, make_close: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    store = OutboxStore(root)
    _enqueue(store, make_close, "run-a")
    shutil.rmtree(root)
    with pytest.raises(OutboxReplacedError, match=re.escape(f"{root}: missing, but ")):
        OutboxStore(root)
    assert _status(capsys)[0] == ExitCode.INTEGRITY
    _run_refused(capsys)
    assert not root.exists()


def test_a_ledger_of_another_outbox_is_refused(root: Path, tmp_path: Path) -> None:
    OutboxStore(root)
    other = OutboxStore(tmp_path / "other" / "close-outbox")
    shutil.copy(other.paths.ledger, root / "ledger")
    with pytest.raises(OutboxReplacedError, match="belongs to outbox"):
        OutboxStore(root)
    (root / "ledger").unlink()
    with pytest.raises(OutboxReplacedError, match="ledger: missing"):
        OutboxStore(root)


# -- entries it knew pending ----------------------------------------------------------------


def test_entries_removed_from_pending_are_reported_and_refused(
    root: Path, make_close: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    store = OutboxStore(root)
    lost, kept = _enqueue(store, make_close, "run-lost", "run-kept")
    (root / "pending" / f"{lost}.json").unlink()
    with pytest.raises(OutboxIntegrityError) as caught:
        OutboxStore(root)
    assert caught.value.lost == (lost,)
    assert str(caught.value).startswith(f"{root}: 1 entries known pending are gone")
    assert OutboxStore(root, verify=False).snapshot().lost == (lost,)
    code, report, err = _status(capsys)
    assert (code, err) == (ExitCode.INTEGRITY, "")
    assert report["counts"] == {"pending": 1, "delivered": 0, "quarantined": 0, "lost": 1}
    assert [(e["state"], e["key"]) for e in report["entries"]] == [
        ("pending", kept),
        ("lost", lost),
    ]
    assert main(["close-outbox", "status"]) == ExitCode.INTEGRITY
    table = capsys.readouterr().out
    assert "LOST 1" in table and f"{lost}.json" in table
    assert lost in _run_refused(capsys)


def test_a_whole_emptied_pending_directory_is_reported(root: Path, make_close: Factory) -> None:
    store = OutboxStore(root)
    keys = _enqueue(store, make_close, "run-a", "run-b", "run-c")
    shutil.rmtree(root / "pending")
    with pytest.raises(OutboxIntegrityError) as caught:
        OutboxStore(root)
    assert sorted(caught.value.lost) == sorted(keys)
    assert (root / "pending").is_dir()  # recreated empty; the loss stays reported
    assert sorted(OutboxStore(root, verify=False).snapshot().lost) == sorted(keys)


def test_delivered_quarantined_and_pruned_entries_are_not_lost(
    root: Path, make_close: Factory, clock: Any
) -> None:
    store = OutboxStore(
        root, clock=clock, retention=Retention(max_age=timedelta(days=1), keep_newest=0)
    )
    _enqueue(store, make_close, "run-delivered")
    anyio.run(replay_pending, store, _applied)
    _enqueue(store, make_close, "run-refused")

    async def refused(record: OutboxRecord) -> CloseDisposition:
        raise ConclusiveRefusalError(RefusalCode.terminal_conflict)

    anyio.run(replay_pending, store, refused)
    assert store.snapshot().delivered_count == 1 and len(store.snapshot().quarantined) == 1
    clock.advance(days=2)
    anyio.run(replay_pending, store, _applied)  # prunes the delivered record
    assert store.snapshot().delivered_count == 0
    # An operator removes the quarantined files after inspecting them.
    for path in store.paths.quarantine.iterdir():
        path.unlink()
    assert OutboxStore(root).snapshot().lost == ()
    assert read_ledger(root / "ledger").known == frozenset()


def test_an_entry_lost_while_the_worker_runs_is_logged_once_and_the_pass_goes_on(
    root: Path, make_close: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    store = OutboxStore(root)
    lost, kept = _enqueue(store, make_close, "run-lost", "run-kept")
    (root / "pending" / f"{lost}.json").unlink()
    with caplog.at_level(logging.ERROR, "rein_aharness"):
        first = anyio.run(replay_pending, store, _applied)
        second = anyio.run(replay_pending, store, _applied)
    assert [o.key for o in first.outcomes if o.outcome == "delivered"] == [kept]
    assert first.lost == second.lost == (lost,)
    lines = [r.getMessage() for r in caplog.records if lost in r.getMessage()]
    assert len(lines) == 1 and "known pending and is gone" in lines[0]
    assert store.snapshot().lost == (lost,)


# -- adopt: an operator accepts what is there -----------------------------------------------


def test_adopt_writes_off_lost_entries_naming_them(
    root: Path, make_close: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    store = OutboxStore(root)
    lost, kept = _enqueue(store, make_close, "run-lost", "run-kept")
    (root / "pending" / f"{lost}.json").unlink()
    assert main(["close-outbox", "adopt", "--json"]) == ExitCode.PENDING
    report = json.loads(capsys.readouterr().out)
    assert report["adopted"] == {
        "outbox_id": store.marker.outbox_id,
        "created": False,
        "replaced": None,
        "written_off": [lost],
    }
    assert report["counts"] == {"pending": 1, "delivered": 0, "quarantined": 0}
    reopened = OutboxStore(root)  # the worker starts again
    assert reopened.marker == store.marker
    assert read_ledger(root / "ledger").known == {kept}


def test_adopt_accepts_a_replaced_outbox_and_pins_it(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = OutboxStore(root)
    impostor = OutboxStore(tmp_path / "elsewhere" / "close-outbox")
    shutil.rmtree(root)
    shutil.move(impostor.paths.root, root)
    assert main(["close-outbox", "adopt"]) == ExitCode.CLEAN
    out = capsys.readouterr().out
    assert (
        f"adopted and pinned outbox {impostor.marker.outbox_id} (the state directory had "
        f"recorded outbox {original.marker.outbox_id})"
    ) in out
    assert OutboxStore(root).marker.outbox_id == impostor.marker.outbox_id


def test_adopt_of_a_removed_outbox_creates_a_new_one(root: Path) -> None:
    original = OutboxStore(root)
    shutil.rmtree(root)
    assert main(["close-outbox", "adopt"]) == ExitCode.CLEAN
    assert OutboxStore(root).marker.outbox_id != original.marker.outbox_id


# -- outboxes written before markers existed -----------------------------------------------


def _legacy_outbox(root: Path, make_close: Factory) -> list[str]:
    """The tree an earlier version left: directories, lock files and entries only."""
    scratch = OutboxStore(root.parent.parent / "scratch" / "close-outbox")
    keys = _enqueue(scratch, make_close, "run-a", "run-b")
    root.mkdir(parents=True, mode=0o700)
    for name in ("pending", "delivered", "quarantine", "store.lock", "replay.lock"):
        source = scratch.paths.root / name
        if source.is_dir():
            shutil.copytree(source, root / name)
        else:
            shutil.copy(source, root / name)
    return keys


def test_an_outbox_from_before_markers_is_adopted_with_its_entries_known(
    root: Path, make_close: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    keys = _legacy_outbox(root, make_close)
    with caplog.at_level(logging.WARNING, "rein_aharness"):
        store = OutboxStore(root, identity=WORKER)
    assert "had no identity marker" in caplog.text and "2 pending entries" in caplog.text
    assert store.marker.worker_id == WORKER
    assert read_ledger(root / "ledger").known == set(keys)
    assert len(store.snapshot().pending) == 2
    # From now on a loss is seen.
    (root / "pending" / f"{keys[0]}.json").unlink()
    with pytest.raises(OutboxIntegrityError):
        OutboxStore(root)


# -- the ledger's own crash safety ----------------------------------------------------------


def test_an_entry_the_ledger_missed_is_adopted_not_reported(
    root: Path, make_close: Factory
) -> None:
    """Killed between writing the entry and its ledger line: no false alarm, and from
    the next open on the entry is known."""
    store = OutboxStore(root)
    (key,) = _enqueue(store, make_close, "run-a")
    ledger = root / "ledger"
    ledger.write_bytes(ledger.read_bytes().replace(f"+{key}\n".encode(), b""))
    assert OutboxStore(root).snapshot().lost == ()
    assert read_ledger(ledger).known == {key}
    (root / "pending" / f"{key}.json").unlink()
    with pytest.raises(OutboxIntegrityError):
        OutboxStore(root)


def test_an_entry_moved_before_its_ledger_line_is_not_reported(
    root: Path, make_close: Factory
) -> None:
    """Killed between moving the entry to delivered/ and its `-key` line."""
    store = OutboxStore(root)
    (key,) = _enqueue(store, make_close, "run-a")
    anyio.run(replay_pending, store, _applied)
    with (root / "ledger").open("a") as ledger:
        ledger.write(f"+{key}\n")
    assert OutboxStore(root).snapshot().lost == ()
    assert read_ledger(root / "ledger").known == frozenset()


def test_a_torn_last_ledger_line_is_ignored_and_cut_before_the_next(
    root: Path, make_close: Factory
) -> None:
    store = OutboxStore(root)
    (first,) = _enqueue(store, make_close, "run-a")
    with (root / "ledger").open("ab") as ledger:
        ledger.write(b"+" + b"ab" * 10)  # power lost mid-append
    assert read_ledger(root / "ledger").torn
    (second,) = _enqueue(OutboxStore(root), make_close, "run-b")
    ledger_state = read_ledger(root / "ledger")
    assert not ledger_state.torn and ledger_state.known == {first, second}


def test_a_long_ledger_history_is_compacted_at_the_next_pass(
    root: Path, make_close: Factory
) -> None:
    store = OutboxStore(root)
    (key,) = _enqueue(store, make_close, "run-a")
    with (root / "ledger").open("a") as ledger:
        for index in range(1500):  # entries that came and went
            ledger.write(f"+{index:064x}\n-{index:064x}\n")
    assert read_ledger(root / "ledger").lines == 1 + 1 + 3000
    anyio.run(lambda: replay_pending(store, _applied, limit=0))  # nothing delivered
    compacted = read_ledger(root / "ledger")
    assert (set(compacted.known), compacted.lines) == ({key}, 2)
    assert (root / "ledger").read_text().splitlines()[1] == f"+{key}"
