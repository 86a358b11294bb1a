"""Crash-safe file writes: same-directory temp file, file fsync, atomic replace, dir fsync.

A reader sees either the old file or the complete new one, never a torn one, and once
`write_atomic` returns, the new name survives a crash of the process or the machine.
Temp files carry the `.tmp-` prefix, which no entry name has, so a temp file a crash
left behind is never mistaken for an entry (the store removes them under its lock).

`write_group` is the same for several files at once, with one flush for all of them
(group commit): every temp file is written, then their data is made durable together,
then each is renamed into place, then each directory is fsynced once. The flush is
Linux's syncfs(2) on the outbox's file system: one call writes back and waits for all
of its dirty data and metadata, which costs far less than one fsync per small file.
Where syncfs is not available each temp file is fsynced instead (same guarantees, no
saving). syncfs reports write-back errors since Linux 5.8; on older kernels an I/O
error during the flush can go unreported, as it can for fsync on some file systems.

Every call goes through the `os` module attributes (`os.fsync`, `os.replace`, ...), and
the flush through this module's `syncfs`, not through names imported from them:
crash-injection tests replace those attributes in a child process and kill it between
steps.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path

from rein_aharness.outbox.paths import FILE_MODE

__all__ = [
    "TEMP_PREFIX",
    "FileVersion",
    "file_version",
    "fsync_dir",
    "is_temp_name",
    "move_no_clobber",
    "read_bounded",
    "syncfs",
    "unlink_durable",
    "write_atomic",
    "write_group",
]

FileVersion = tuple[int, int, int]  # inode, mtime (ns), size: which write a file is

TEMP_PREFIX = ".tmp-"

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


def is_temp_name(name: str) -> bool:
    return name.startswith(TEMP_PREFIX)


def file_version(info: os.stat_result) -> FileVersion:
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_SYNCFS = _load_syncfs()


def syncfs(fd: int) -> bool:
    """Write back and wait for all dirty data of `fd`'s file system; False where the
    system has no syncfs (the caller then fsyncs file by file)."""
    if _SYNCFS is None:
        return False
    if _SYNCFS(fd) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return True


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (creations, renames, unlinks) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    directory: Path, name: str, data: bytes, *, temp_prefix: str = TEMP_PREFIX
) -> None:
    """Durably replace `directory/name` with `data`, mode 0600.

    `temp_prefix` names the temp file (it must start with TEMP_PREFIX): a directory the
    outbox shares with others tells its own leftovers by it.
    """
    temp = directory / f"{temp_prefix}{secrets.token_hex(8)}"
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


def write_group(files: Sequence[tuple[Path, str, bytes]]) -> list[FileVersion]:
    """Durably replace each `directory/name` with its data (mode 0600), with one flush.

    Order: every temp file written; one flush (syncfs, else an fsync per temp file);
    every rename; one fsync per directory. A crash leaves each file old or new, never
    torn, and no rename is durable before the data it names. Returns each new file's
    version, in order.
    """
    if not files:
        return []
    # Plain strings: a backlog passes through here thousands of times, and building
    # Path objects would cost more than the system calls.
    written: list[tuple[str, int]] = []
    versions: list[FileVersion] = []
    try:
        for directory, _, data in files:
            temp = f"{directory}/{TEMP_PREFIX}{secrets.token_hex(8)}"
            fd = os.open(temp, _WRITE_FLAGS, FILE_MODE)
            written.append((temp, fd))
            os.fchmod(fd, FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        if not syncfs(written[0][1]):
            for _, fd in written:
                os.fsync(fd)
        for _, fd in written:
            versions.append(file_version(os.fstat(fd)))
        for (temp, _), (directory, name, _) in zip(written, files, strict=True):
            os.replace(temp, f"{directory}/{name}")
    except BaseException:
        for temp, _ in written:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        raise
    finally:
        for _, fd in written:
            os.close(fd)
    for directory in dict.fromkeys(directory for directory, _, _ in files):
        fsync_dir(directory)
    return versions
