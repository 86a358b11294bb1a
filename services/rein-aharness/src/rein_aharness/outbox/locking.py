"""Process-safe advisory locks (`flock`) on files in the outbox root.

`flock` locks belong to an open file description, so every acquisition opens the lock
file afresh: two threads or two tasks of one process then exclude each other exactly
like two processes do. The kernel drops the lock when the holder dies, SIGKILL
included, so a crashed worker never leaves the outbox locked.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio

from rein_aharness.outbox.paths import FILE_MODE

__all__ = [
    "ensure_lock_file",
    "hold_directory_lock",
    "hold_fd_lock_async",
    "hold_lock",
    "hold_lock_async",
]

_POLL_SECONDS = 0.05


def _open_lock_file(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_lock_file(path: Path) -> None:
    """Create the lock file (mode 0600) without taking the lock."""
    os.close(_open_lock_file(path))


@contextmanager
def hold_lock(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Block until the lock is held; release it on exit."""
    fd = _open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def hold_directory_lock(path: Path) -> Iterator[None]:
    """Exclusive flock on a directory itself (the state directory, while the outbox in
    it is opened or created): no lock file is needed where none exists yet."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@asynccontextmanager
async def hold_lock_async(path: Path) -> AsyncIterator[None]:
    """Exclusive lock on the lock file at `path`, cancellable while it waits
    (hold_fd_lock_async)."""
    async with hold_fd_lock_async(_open_lock_file(path)):
        yield


@asynccontextmanager
async def hold_fd_lock_async(fd: int) -> AsyncIterator[None]:
    """Exclusive flock on the open descriptor `fd`, acquired by polling with LOCK_NB so
    waiting stays cancellable; `fd` is closed when the block ends, held or not.

    A blocking flock in a worker thread could not be abandoned on cancellation without
    leaking a descriptor that would hold the lock for the rest of the process's life.
    """
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            await anyio.sleep(_POLL_SECONDS)
        yield
    finally:
        os.close(fd)
