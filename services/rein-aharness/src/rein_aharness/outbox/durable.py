"""Crash-safe file writes: same-directory temp file, file fsync, atomic replace, dir fsync.

A reader sees either the old file or the complete new one, never a torn one, and once
`write_atomic` returns, the new name survives a crash of the process or the machine.
Temp files carry the `.tmp-` prefix, which no entry name has, so a temp file a crash
left behind is never mistaken for an entry (the store removes them under its lock).

Every call goes through the `os` module attributes (`os.fsync`, `os.replace`, ...) and
not through names imported from it: crash-injection tests replace those attributes in
a child process and kill it between steps.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from rein_aharness.outbox.paths import FILE_MODE

__all__ = [
    "TEMP_PREFIX",
    "fsync_dir",
    "is_temp_name",
    "move_no_clobber",
    "read_bounded",
    "unlink_durable",
    "write_atomic",
]

TEMP_PREFIX = ".tmp-"

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


def is_temp_name(name: str) -> bool:
    return name.startswith(TEMP_PREFIX)


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (creations, renames, unlinks) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(directory: Path, name: str, data: bytes) -> None:
    """Durably replace `directory/name` with `data`, mode 0600."""
    temp = directory / f"{TEMP_PREFIX}{secrets.token_hex(8)}"
    fd = os.open(temp, _WRITE_FLAGS, FILE_MODE)
    try:
        try:
            # The umask applies to os.open's mode; the chmod makes 0600 exact.
            os.fchmod(fd, FILE_MODE)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, directory / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(directory)


def move_no_clobber(source: Path, target: Path) -> None:
    """Rename `source` to `target` intact, refusing to overwrite anything.

    The caller holds the store lock, so no other outbox process creates `target`
    between the check and the rename. Both directories are fsynced afterwards.
    """
    if os.path.lexists(target):
        raise FileExistsError(target)
    os.rename(source, target)
    fsync_dir(target.parent)
    if source.parent != target.parent:
        fsync_dir(source.parent)


def unlink_durable(path: Path) -> None:
    os.unlink(path)
    fsync_dir(path.parent)


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The file's bytes, or None when it is larger than `limit` (read at most limit+1).

    Symlinks are not followed (ELOOP surfaces as OSError).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return None if len(data) > limit else data
