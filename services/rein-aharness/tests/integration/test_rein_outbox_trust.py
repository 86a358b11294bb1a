"""The outbox's directories are trusted only if they deserve it (outbox/trust.py).

Run as root (as CI does): the other uid is `nobody`, a neighbour process that drops to
it shows what the permissions let it do. Every refusal is one line naming the path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rein_aharness.cli import main
from rein_aharness.operator.exit_codes import ExitCode
from rein_aharness.outbox import OutboxStore, OutboxUntrustedError
from rein_worker_kit import cli_environment

# `run` configures the `rein_aharness` logger for the process; undone per test
pytestmark = pytest.mark.usefixtures("restore_logging")

NOBODY = 65534
# The neighbour runs the system's Python: the project's lives under /root, which nobody
# may not enter.
NEIGHBOUR_PYTHON = "/usr/bin/python3"
Factory = Callable[..., dict[str, Any]]


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory outside pytest's private tmp dir (0700 root), so `nobody` can reach it.

    /tmp is world-writable with the sticky bit, which the checks accept for ancestors.
    """
    path = Path(tempfile.mkdtemp(prefix="outbox-trust-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cli_environment(monkeypatch, tmp_path, "rein-aharness@trust01")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _refusals(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[str, str]:
    """What `close-outbox status` and `run --once` print on stderr; both must exit 4."""
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(state))
    assert main(["close-outbox", "status"]) == ExitCode.STORE_UNUSABLE
    assert int(ExitCode.STORE_UNUSABLE) == 4
    status = capsys.readouterr()
    assert status.out == ""
    assert main(["run", "--once"]) == ExitCode.STORE_UNUSABLE
    run = capsys.readouterr().err
    for err in (status.err, run):
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith("rein-aharness: close outbox unusable: ")
    return status.err, run


# -- what is accepted, next to what is not -------------------------------------------------


def test_real_private_directories_are_accepted_and_created_0700_and_one_others_may_write_is_not(
    base: Path, make_close: Factory
) -> None:
    state = base / "a" / "b" / "state"
    store = OutboxStore(state / "close-outbox")
    store.enqueue_close(**make_close())
    for directory in (base / "a", base / "a" / "b", state, *store.paths.directories()):
        info = os.lstat(directory)
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid(), directory
        assert _mode(directory) == 0o700, directory
    assert len(OutboxStore(state / "close-outbox").snapshot().pending) == 1
    os.chmod(store.paths.delivered, 0o730)
    with pytest.raises(OutboxUntrustedError, match="delivered: writable by group"):
        OutboxStore(state / "close-outbox")


def test_an_ancestor_others_may_write_needs_the_sticky_bit(base: Path) -> None:
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp: only an entry's owner may rename it
    OutboxStore(shared / "state" / "close-outbox")
    os.chmod(shared, 0o777)
    with pytest.raises(OutboxUntrustedError) as caught:
        OutboxStore(shared / "state" / "close-outbox")
    assert str(caught.value) == (
        f"{shared}: writable by group and others without the sticky bit (mode 0777), "
        "so they could rename the outbox away"
    )


def test_a_state_dir_others_may_read_is_left_alone_but_not_one_they_may_write(
    base: Path,
) -> None:
    state = base / "state"
    state.mkdir()
    os.chmod(state, 0o755)
    OutboxStore(state / "close-outbox")
    assert _mode(state) == 0o755  # it also holds the worker's lock and worktrees
    assert _mode(state / "close-outbox") == 0o700
    os.chmod(state, 0o775)
    os.chown(state, -1, NOBODY)  # a group that is not the worker's
    with pytest.raises(OutboxUntrustedError, match=f"{state}: writable by group"):
        OutboxStore(state / "close-outbox")


# -- symlinks -----------------------------------------------------------------------------


def test_a_symlinked_state_dir_is_followed_when_root_owns_the_link(base: Path) -> None:
    real = base / "real-state"
    real.mkdir(mode=0o700)
    link = base / "state"
    link.symlink_to(real)
    OutboxStore(link / "close-outbox")
    assert (real / "close-outbox" / "pending").is_dir()
    assert (real / "close-outbox.id").is_file()
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(OutboxUntrustedError, match=f"{link}: a symlink owned by uid {NOBODY}"):
        OutboxStore(link / "close-outbox")


def test_a_symlinked_state_dir_owned_by_another_uid_is_refused(
    base: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = base / "real-state"
    real.mkdir(mode=0o700)
    link = base / "state"
    link.symlink_to(real)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(OutboxUntrustedError) as caught:
        OutboxStore(link / "close-outbox")
    assert str(caught.value).startswith(f"{link}: a symlink owned by uid {NOBODY}")
    status, run = _refusals(link, monkeypatch, capsys)
    assert f"{link}: a symlink owned by uid {NOBODY}" in status and str(link) in run
    assert os.listdir(real) == []  # nothing was created through it


def test_a_symlink_of_another_uid_higher_up_the_path_is_refused(base: Path) -> None:
    real = base / "real-parent"
    real.mkdir(mode=0o755)
    link = base / "parent"
    link.symlink_to(real)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(OutboxUntrustedError, match=f"{link}: a symlink owned by uid {NOBODY}"):
        OutboxStore(link / "state" / "close-outbox")


@pytest.mark.parametrize("name", ["close-outbox", "close-outbox/pending"])
def test_a_symlink_inside_the_state_dir_is_refused_even_if_owned_by_the_worker(
    base: Path, name: str
) -> None:
    state = base / "state"
    OutboxStore(state / "close-outbox")
    elsewhere = base / "elsewhere"
    shutil.move(state / name, elsewhere)
    (state / name).symlink_to(elsewhere)
    with pytest.raises(OutboxUntrustedError, match="a symlink, not a directory"):
        OutboxStore(state / "close-outbox")


# -- modes and owners ---------------------------------------------------------------------

OUTBOX_DIRS = ["state", "close-outbox", "pending", "delivered", "quarantine"]


def _dir(state: Path, which: str) -> Path:
    if which == "state":
        return state
    if which == "close-outbox":
        return state / "close-outbox"
    return state / "close-outbox" / which


@pytest.mark.parametrize(
    ("mode", "writers"),
    [
        (0o770, "group"),
        (0o720, "group"),
        (0o702, "others"),
        (0o777, "group and others"),
        (0o1777, "group and others"),
    ],
)
@pytest.mark.parametrize("which", OUTBOX_DIRS)
def test_a_directory_group_or_others_may_write_is_refused(
    base: Path,
    which: str,
    mode: int,
    writers: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = base / "state"
    OutboxStore(state / "close-outbox")
    target = _dir(state, which)
    os.chmod(target, mode)
    # another group than the worker's own (a state dir its own group may write is a
    # Kubernetes fsGroup volume: test_a_kubernetes_fsgroup_volume_...)
    os.chown(target, -1, NOBODY)
    expected = f"{target}: writable by {writers} (mode {mode:04o})"
    with pytest.raises(OutboxUntrustedError) as caught:
        OutboxStore(state / "close-outbox")
    assert str(caught.value).startswith(expected)
    status, run = _refusals(state, monkeypatch, capsys)
    assert expected in status and expected in run
    assert _mode(target) == mode  # refused, not repaired


@pytest.mark.parametrize("which", OUTBOX_DIRS)
def test_a_directory_owned_by_another_uid_is_refused(
    base: Path, which: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = base / "state"
    OutboxStore(state / "close-outbox")
    target = _dir(state, which)
    os.chown(target, NOBODY, NOBODY)
    expected = f"{target}: owned by uid {NOBODY}, not by this worker's uid {os.geteuid()}"
    with pytest.raises(OutboxUntrustedError) as caught:
        OutboxStore(state / "close-outbox")
    assert str(caught.value) == expected
    status, _ = _refusals(state, monkeypatch, capsys)
    assert expected in status


def test_an_ancestor_owned_by_another_uid_is_refused(base: Path) -> None:
    parent = base / "theirs"
    parent.mkdir(mode=0o755)
    os.chown(parent, NOBODY, NOBODY)
    with pytest.raises(OutboxUntrustedError, match=f"{parent}: owned by uid {NOBODY}; every"):
        OutboxStore(parent / "state" / "close-outbox")
    assert not (parent / "state").exists()


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_an_ancestor_group_or_others_may_write_without_the_sticky_bit_is_refused(
    base: Path, mode: int
) -> None:
    parent = base / "shared"
    parent.mkdir()
    os.chmod(parent, mode)
    os.chown(parent, -1, NOBODY)  # a group that is not the worker's
    with pytest.raises(OutboxUntrustedError, match="without the sticky bit"):
        OutboxStore(parent / "state" / "close-outbox")


def test_a_kubernetes_fsgroup_volume_is_the_workers_but_nothing_looser(base: Path) -> None:
    """A pod's volume (fsGroup): root's, group-owned by the worker's own gid, group-writable
    and setgid. The state directory may be such a volume, or lie below one; the outbox
    below it is still the worker's alone."""
    volume = base / "volume"
    volume.mkdir()
    os.chown(volume, 0, os.getegid())
    os.chmod(volume, 0o2770)
    store = OutboxStore(volume / "close-outbox")  # the state dir is the volume itself
    assert all(_mode(d) == 0o700 for d in store.paths.directories())
    OutboxStore(volume / "below" / "close-outbox")  # or lies below it
    for refused_mode, group in ((0o2777, os.getegid()), (0o2770, NOBODY)):
        os.chmod(volume, refused_mode)
        os.chown(volume, 0, group)
        with pytest.raises(OutboxUntrustedError):
            OutboxStore(volume / "close-outbox")
        with pytest.raises(OutboxUntrustedError):
            OutboxStore(volume / "below" / "close-outbox")


# -- a neighbour with another uid ----------------------------------------------------------

# Runs as `nobody`. Each step is attempted whatever the earlier ones did; the errno name
# (or "ok") of every step is printed as JSON.
NEIGHBOUR = """
import errno, json, os, sys
state = sys.argv[1]
outbox = os.path.join(state, "close-outbox")
pending = os.path.join(outbox, "pending")
results = {}

def attempt(name, step):
    try:
        step()
        results[name] = "ok"
    except OSError as exc:
        results[name] = errno.errorcode[exc.errno]

def plant(directory):
    fd = os.open(os.path.join(directory, "f" * 64 + ".json"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b'{"forged": true}')
    os.close(fd)

def delete_entries():
    for name in os.listdir(pending):
        os.unlink(os.path.join(pending, name))

def swap_outbox():
    os.rename(outbox, os.path.join(state, "stolen"))
    os.mkdir(outbox)
    os.mkdir(os.path.join(outbox, "pending"))
    plant(os.path.join(outbox, "pending"))

attempt("list_state", lambda: os.listdir(state))
attempt("delete_entries", delete_entries)
attempt("plant_entry", lambda: plant(pending))
attempt("swap_outbox", swap_outbox)
attempt("move_state_away", lambda: os.rename(state, state + ".moved"))
print(json.dumps(results))
"""


def _neighbour(state: Path) -> dict[str, str]:
    completed = subprocess.run(
        [NEIGHBOUR_PYTHON, "-c", NEIGHBOUR, str(state)],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    results = json.loads(completed.stdout)
    assert isinstance(results, dict)
    return results


def _outbox_with_one_entry(state: Path, make_close: Factory) -> str:
    store = OutboxStore(state / "close-outbox")
    return store.enqueue_close(**make_close()).record.key


STEPS = ["list_state", "delete_entries", "plant_entry", "swap_outbox", "move_state_away"]


def _state_writable(state: Path) -> Path:
    os.chmod(state.parent, 0o755)  # others may pass through, not change
    os.chmod(state, 0o777)
    return state


def _pending_writable(state: Path) -> Path:
    os.chmod(state.parent, 0o755)
    os.chmod(state, 0o711)
    os.chmod(state / "close-outbox", 0o711)
    os.chmod(state / "close-outbox" / "pending", 0o777)
    return state / "close-outbox" / "pending"


def _parent_writable(state: Path) -> Path:
    os.chmod(state.parent, 0o777)  # no sticky bit
    return state.parent


MISTAKES: dict[str, tuple[Callable[[Path], Path], dict[str, str]]] = {
    # the mistake, and the neighbour's steps that then succeed
    "state dir others may write": (_state_writable, {"list_state": "ok", "swap_outbox": "ok"}),
    "pending dir others may write": (
        _pending_writable,
        {"delete_entries": "ok", "plant_entry": "ok"},
    ),
    "parent others may write": (_parent_writable, {"move_state_away": "ok"}),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_the_neighbour_changes_nothing_in_private_directories_and_the_worker_refuses_the_rest(
    base: Path,
    make_close: Factory,
    mistake: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = base / "parent" / "state"
    key = _outbox_with_one_entry(state, make_close)
    # Private directories: every attempt of the neighbour's fails with EACCES.
    assert _neighbour(state) == dict.fromkeys(STEPS, "EACCES")
    snapshot = OutboxStore(state / "close-outbox").snapshot()
    assert [entry.key for entry in snapshot.pending] == [key] and snapshot.lost == ()

    make_vulnerable, succeeded = MISTAKES[mistake]
    culprit = make_vulnerable(state)
    assert _neighbour(state) == {**dict.fromkeys(STEPS, "EACCES"), **succeeded}
    # The neighbour swapped the outbox, deleted the entry, or moved the state directory
    # away: without the check the worker would start on what it left, the close gone.
    expected = f"{culprit}: writable by group and others"
    with pytest.raises(OutboxUntrustedError, match=re.escape(expected)):
        OutboxStore(state / "close-outbox")
    if state.exists():
        status, run = _refusals(state, monkeypatch, capsys)
        assert expected in status and expected in run
