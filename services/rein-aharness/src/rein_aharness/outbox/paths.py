"""Where the close outbox lives, and the private directory tree it needs.

The root is chosen once, from the state directory setting or the XDG fallbacks, and is
never inside a target checkout. Every directory of the tree is 0700 and every file
0600 *on disk*: modes are set with an explicit chmod after creation, so a permissive
umask (0o000) cannot widen them and a restrictive one cannot narrow them. Which
directories are trusted at all is trust.py's; creating the tree is identity.py's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from rein_aharness.outbox.errors import OutboxPathError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "OutboxPaths",
    "default_state_dir",
    "ensure_private_dir",
    "narrow_to_private",
    "resolve_outbox_root",
]

DIR_MODE = 0o700
FILE_MODE = 0o600

_APP_DIR = "rein-aharness"
_OUTBOX_DIR = "close-outbox"


def default_state_dir(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """`$REIN_AHARNESS_STATE_DIR`, else `$XDG_STATE_HOME/rein-aharness`, else
    `~/.local/state/rein-aharness`.

    An empty variable counts as absent. A relative `XDG_STATE_HOME` is ignored, as the
    XDG base directory specification requires; a relative `REIN_AHARNESS_STATE_DIR` is
    refused, because it would resolve against the working directory, which may be a
    target checkout.
    """
    environ = os.environ if env is None else env
    explicit = environ.get("REIN_AHARNESS_STATE_DIR", "")
    if explicit:
        path = Path(explicit)
        if not path.is_absolute():
            raise OutboxPathError("REIN_AHARNESS_STATE_DIR must be an absolute path")
        return path
    xdg = environ.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / _APP_DIR
    base = home if home is not None else Path(environ.get("HOME", "") or Path.home())
    return base / ".local" / "state" / _APP_DIR


def resolve_outbox_root(
    state_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """The outbox root: `<state dir>/close-outbox`."""
    base = state_dir if state_dir is not None else default_state_dir(env)
    if not base.is_absolute():
        raise OutboxPathError("the rein-aharness state directory must be an absolute path")
    return base / _OUTBOX_DIR


@dataclass(frozen=True)
class OutboxPaths:
    """The fixed layout under one root, and the root's record in its state directory.

    Each path is built once (the replay of a backlog asks for them per entry).
    """

    root: Path

    @cached_property
    def state_dir(self) -> Path:
        return self.root.parent

    @cached_property
    def pending(self) -> Path:
        return self.root / "pending"

    @cached_property
    def delivered(self) -> Path:
        return self.root / "delivered"

    @cached_property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @cached_property
    def store_lock(self) -> Path:
        """Held briefly around every read-modify-write of the tree."""
        return self.root / "store.lock"

    @cached_property
    def replay_lock(self) -> Path:
        """Held across a whole replay pass, delivery callbacks included."""
        return self.root / "replay.lock"

    @cached_property
    def marker(self) -> Path:
        """The outbox's identity (identity.py), written when the outbox is created."""
        return self.root / "outbox.json"

    @cached_property
    def ledger(self) -> Path:
        """The keys the outbox knows pending (ledger.py)."""
        return self.root / "ledger"

    @cached_property
    def pin(self) -> Path:
        """The state directory's copy of the marker: which outbox belongs here."""
        return self.state_dir / f"{self.root.name}.id"

    def directories(self) -> tuple[Path, Path, Path, Path]:
        return (self.root, self.pending, self.delivered, self.quarantine)


def ensure_private_dir(path: Path) -> None:
    """Make `path` a real directory of mode 0700, whatever the umask.

    A symlink is refused rather than followed: the state tree must be the directory it
    claims to be, not a pointer an unprivileged process could redirect.
    """
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise OutboxPathError(f"cannot create outbox directory {path}: {exc.strerror}") from exc
    else:
        _fsync_parent(path)
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise OutboxPathError(f"cannot inspect outbox directory {path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise OutboxPathError(f"outbox path {path} exists and is not a directory")
    narrow_to_private(path, info)


def narrow_to_private(path: Path, info: os.stat_result) -> None:
    """Give the directory at `path` (`info`, its lstat) mode 0700 unless it has it."""
    if stat.S_IMODE(info.st_mode) != DIR_MODE:
        try:
            os.chmod(path, DIR_MODE)
        except OSError as exc:
            raise OutboxPathError(
                f"cannot make outbox directory {path} private: {exc.strerror}"
            ) from exc


def _fsync_parent(path: Path) -> None:
    # A new directory is only durable once its parent's entry is.
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
