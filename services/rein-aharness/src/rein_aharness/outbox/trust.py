"""Whether the directories the outbox lives in deserve trust (like OpenSSH's StrictModes).

The outbox is only as safe as its directories: whoever can write to close-outbox/ or
pending/ can delete a pending close or plant one; whoever can write to a parent can
rename the outbox (or the whole state directory) away, so that the worker starts afresh
and the pending closes are gone; whoever owns a symlink on the way can point it
elsewhere. So before the store reads or writes anything it checks the path, and refuses
(OutboxUntrustedError, one line naming the path and what is wrong) rather than repairs:

* every directory from `/` down to the state directory's parent, and every symlink met
  on the way (symlinks are followed), is owned by root or by the worker's uid; such a
  directory that group or others may write must have the sticky bit (like /tmp), where
  only an entry's owner may rename or remove it;
* the state directory, close-outbox/ and its pending/, delivered/ and quarantine/ are
  real directories owned by the worker's uid (its effective uid) that neither group nor
  others may write. The state directory may be reached through a symlink of root's or
  the worker's; inside it, a symlink is never followed.
* one exception, for the volumes Kubernetes gives a pod (`fsGroup`: the volume's root is
  root's, group-owned by the pod's group and group-writable, setgid): a directory on the
  way, and the state directory itself, may be writable by its group when that group is
  the worker's own (effective) gid and others may not write it; the state directory may
  then be root's. Whoever shares the worker's primary group is trusted as the worker is
  (in a pod, nobody else). close-outbox/ and below stay the worker's alone, 0700.

Directories the outbox creates are created 0700 (an explicit chmod, whatever the umask).
An outbox directory that only its owner may write but others may read (0755) is
narrowed to 0700, since nobody else could have changed it; one that others may write is
refused, since someone may already have. The state directory's own mode is left alone
beyond that rule (it also holds the worker's lock and worktrees).

The checks run when a store is opened. A directory is trusted here against other local
users, not against root or the worker's own uid, who could rewrite anything; what the
outbox does against a replaced or emptied directory is identity.py's and ledger.py's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rein_aharness.outbox.errors import OutboxPathError, OutboxUntrustedError
from rein_aharness.outbox.paths import DIR_MODE, narrow_to_private

__all__ = ["make_private_dir", "secure_outbox_dir", "secure_state_dir"]

_MAX_SYMLINKS = 40


def secure_state_dir(state_dir: Path) -> Path:
    """Check the path to `state_dir`, creating what is missing (0700); return the real
    directory it names (symlinks resolved).

    Raises OutboxUntrustedError for a path someone else could change, OutboxPathError
    for one that cannot be created or is not a directory.
    """
    if not state_dir.is_absolute():
        raise OutboxPathError(f"the state directory must be an absolute path: {state_dir}")
    uid = os.geteuid()
    current = Path("/")
    _check_ancestor(current, _lstat(current), uid)
    remaining = list(state_dir.parts[1:])
    symlinks = 0
    while remaining:
        name = remaining.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        candidate = current / name
        info = _lstat_or_create(candidate)
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid not in (0, uid):
                raise OutboxUntrustedError(
                    f"{candidate}: a symlink owned by uid {info.st_uid}; symlinks on the way "
                    f"to the outbox must be owned by root or by this worker's uid {uid}"
                )
            symlinks += 1
            if symlinks > _MAX_SYMLINKS:
                raise OutboxPathError(f"{state_dir}: too many levels of symbolic links")
            target = Path(os.readlink(candidate))
            if target.is_absolute():
                current = Path("/")
                remaining = list(target.parts[1:]) + remaining
            else:
                remaining = list(target.parts) + remaining
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise OutboxPathError(f"{candidate}: exists and is not a directory")
        if remaining:
            _check_ancestor(candidate, info, uid)
        elif not _workers_group_volume(info, uid):
            _check_private(candidate, info, uid)
        current = candidate
    if current == Path("/"):
        raise OutboxPathError("the state directory cannot be /")
    return current


def secure_outbox_dir(path: Path, *, create: bool = True) -> bool:
    """Make sure `path` (close-outbox/ or one of its directories) is a real, private
    directory of the worker's, creating it 0700 if missing and `create`; narrow a
    readable one to 0700. Returns False when it is missing and not created.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        make_private_dir(path)
        info = _lstat(path)
    except OSError as exc:
        raise OutboxPathError(f"cannot inspect outbox directory {path}: {exc.strerror}") from exc
    if stat.S_ISLNK(info.st_mode):
        raise OutboxUntrustedError(
            f"{path}: a symlink, not a directory; the outbox follows no symlink"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise OutboxPathError(f"outbox path {path} exists and is not a directory")
    _check_private(path, info, os.geteuid())
    narrow_to_private(path, info)
    return True


def make_private_dir(path: Path) -> None:
    """mkdir `path` with mode 0700 exactly, and make its entry in the parent durable."""
    try:
        os.mkdir(path, DIR_MODE)
        os.chmod(path, DIR_MODE)
    except OSError as exc:
        raise OutboxPathError(f"cannot create outbox directory {path}: {exc.strerror}") from exc
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _lstat(path: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except OSError as exc:
        raise OutboxPathError(f"cannot inspect {path}: {exc.strerror}") from exc


def _lstat_or_create(path: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise OutboxPathError(f"cannot inspect {path}: {exc.strerror}") from exc
    try:
        make_private_dir(path)
    except OutboxPathError:
        if not os.path.lexists(path):
            raise
    return _lstat(path)


def _writers(mode: int) -> str | None:
    """Who besides the owner may write, as words; None: nobody."""
    group, others = bool(mode & stat.S_IWGRP), bool(mode & stat.S_IWOTH)
    if group and others:
        return "group and others"
    if group:
        return "group"
    if others:
        return "others"
    return None


def _workers_group_volume(info: os.stat_result, uid: int) -> bool:
    """A directory of root's or the worker's that only its owner and the worker's own
    group may write (a Kubernetes fsGroup volume)."""
    return (
        info.st_uid in (0, uid) and info.st_gid == os.getegid() and not info.st_mode & stat.S_IWOTH
    )


def _check_ancestor(path: Path, info: os.stat_result, uid: int) -> None:
    if info.st_uid not in (0, uid):
        raise OutboxUntrustedError(
            f"{path}: owned by uid {info.st_uid}; every directory on the way to the outbox "
            f"must be owned by root or by this worker's uid {uid}"
        )
    writers = _writers(info.st_mode)
    if writers is not None and not info.st_mode & stat.S_ISVTX:
        if _workers_group_volume(info, uid):
            return
        raise OutboxUntrustedError(
            f"{path}: writable by {writers} without the sticky bit "
            f"(mode {stat.S_IMODE(info.st_mode):04o}), so they could rename the outbox away"
        )


def _check_private(path: Path, info: os.stat_result, uid: int) -> None:
    if info.st_uid != uid:
        raise OutboxUntrustedError(
            f"{path}: owned by uid {info.st_uid}, not by this worker's uid {uid}"
        )
    writers = _writers(info.st_mode)
    if writers is not None:
        raise OutboxUntrustedError(
            f"{path}: writable by {writers} (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"it must be writable by its owner (uid {uid}) only"
        )
