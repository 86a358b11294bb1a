"""Storage: the root, its fallbacks, and private modes on disk whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from ops_contracts import CloseDisposition, RefusalCode
from rein_aharness.outbox import (
    ConclusiveRefusalError,
    OutboxPathError,
    OutboxStore,
    default_state_dir,
    replay_pending,
    resolve_outbox_root,
)
from rein_aharness.outbox.record import OutboxRecord


def test_root_is_under_rein_aharness_state_dir(tmp_path: Path) -> None:
    env = {"REIN_AHARNESS_STATE_DIR": str(tmp_path / "s"), "XDG_STATE_HOME": "/xdg"}
    assert resolve_outbox_root(env=env) == tmp_path / "s" / "close-outbox"


def test_root_falls_back_to_xdg_state_home(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg"), "HOME": "/home/nobody"}
    assert resolve_outbox_root(env=env) == tmp_path / "xdg" / "rein-aharness" / "close-outbox"


def test_root_falls_back_to_local_state_under_home(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    expected = tmp_path / ".local" / "state" / "rein-aharness" / "close-outbox"
    assert resolve_outbox_root(env=env) == expected


def test_empty_variables_count_as_absent(tmp_path: Path) -> None:
    env = {"REIN_AHARNESS_STATE_DIR": "", "XDG_STATE_HOME": "", "HOME": str(tmp_path)}
    assert default_state_dir(env) == tmp_path / ".local" / "state" / "rein-aharness"


def test_relative_xdg_state_home_is_ignored(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": "relative/xdg", "HOME": str(tmp_path)}
    assert default_state_dir(env) == tmp_path / ".local" / "state" / "rein-aharness"


def test_relative_state_dir_is_refused() -> None:
    # A relative root would land in the working directory, possibly a target checkout.
    with pytest.raises(OutboxPathError, match="REIN_AHARNESS_STATE_DIR"):
        default_state_dir({"REIN_AHARNESS_STATE_DIR": "state"})
    with pytest.raises(OutboxPathError):
        resolve_outbox_root(Path("state"))


def test_explicit_state_dir_argument_wins_over_environment(tmp_path: Path) -> None:
    env = {"REIN_AHARNESS_STATE_DIR": "/elsewhere"}
    assert resolve_outbox_root(tmp_path, env) == tmp_path / "close-outbox"


def test_store_creates_pending_delivered_quarantine(outbox_root: Path) -> None:
    OutboxStore(outbox_root)
    for name in ("pending", "delivered", "quarantine"):
        assert (outbox_root / name).is_dir()


@pytest.fixture(params=[0o000, 0o022, 0o077, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_directories_0700_and_files_0600_on_disk_whatever_the_umask(
    umask: int,
    tmp_path: Path,
    make_close: Callable[..., dict[str, Any]],
) -> None:
    state = tmp_path / "fresh" / "state"
    store = OutboxStore(state / "close-outbox")
    store.enqueue_close(**make_close(run_id="run-a"))
    store.enqueue_close(**make_close(run_id="run-b"))
    store.enqueue_close(**make_close(run_id="run-c"))
    outcomes: Iterator[CloseDisposition | Exception] = iter(
        [CloseDisposition.applied, ConclusiveRefusalError(RefusalCode.not_found)]
    )

    async def deliver(record: OutboxRecord) -> CloseDisposition:
        outcome = next(outcomes, None)
        if isinstance(outcome, Exception):
            raise outcome
        if outcome is None:
            raise RuntimeError("stays pending")
        return outcome

    anyio.run(replay_pending, store, deliver)
    root = store.paths.root
    # Parents the store had to create are private too.
    for directory in (state, root, root / "pending", root / "delivered", root / "quarantine"):
        assert _mode(directory) == 0o700, directory
    files = [path for path in root.rglob("*") if path.is_file()]
    names = {path.name for path in files}
    assert {"store.lock", "replay.lock"} <= names
    assert any(name.endswith(".reason.json") for name in names)
    assert len(list((root / "pending").iterdir())) == 1
    assert len(list((root / "delivered").iterdir())) == 1
    for path in files:
        assert _mode(path) == 0o600, path


def test_existing_readable_directories_are_made_private(outbox_root: Path) -> None:
    for sub in ("", "pending", "delivered", "quarantine"):
        (outbox_root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(outbox_root / sub, 0o755)
    OutboxStore(outbox_root)
    for sub in ("", "pending", "delivered", "quarantine"):
        assert _mode(outbox_root / sub) == 0o700


def test_existing_directories_others_may_write_are_refused_not_repaired(
    outbox_root: Path,
) -> None:
    # Someone may already have changed what is in them (test_rein_outbox_trust.py).
    for sub in ("", "pending", "delivered", "quarantine"):
        (outbox_root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(outbox_root / sub, 0o777)
    with pytest.raises(OutboxPathError, match="writable by group and others"):
        OutboxStore(outbox_root)
    assert _mode(outbox_root) == 0o777


def test_existing_lock_file_with_wide_mode_is_made_private(outbox_root: Path) -> None:
    outbox_root.mkdir(parents=True)
    (outbox_root / "store.lock").touch()
    os.chmod(outbox_root / "store.lock", 0o666)
    OutboxStore(outbox_root)
    assert _mode(outbox_root / "store.lock") == 0o600


def test_a_symlinked_outbox_directory_is_refused(outbox_root: Path, tmp_path: Path) -> None:
    outbox_root.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (outbox_root / "pending").symlink_to(elsewhere)
    with pytest.raises(OutboxPathError, match="not a directory"):
        OutboxStore(outbox_root)


def test_a_file_where_the_root_should_be_is_refused(outbox_root: Path) -> None:
    outbox_root.parent.mkdir(parents=True)
    outbox_root.write_text("not a directory")
    with pytest.raises(OutboxPathError):
        OutboxStore(outbox_root)


def test_default_state_lives_outside_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    root = resolve_outbox_root(env={"HOME": str(tmp_path / "home")})
    assert checkout not in root.parents
