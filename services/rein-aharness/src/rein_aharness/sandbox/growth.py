"""A bound on how much an approach may grow its worktree, its git entry and its objects.

These live on the host's disk (the worker's state directory and the repository's git
dir), which a tmpfs size cannot bound, and an unprivileged worker can neither set a quota
nor mount a sized loop device. So the worker measures them: once before the approach
(the baseline: the checkout), every little while as it runs, and once after it ended.
Once they have grown past the profile's `worktree_mb`, the sandbox is killed and the run
fails with `WorktreeTooLarge`'s reason.

What is measured is the disk use (allocated blocks; a sparse file counts what it holds),
each file, directory or link counted at least 4 KiB (so a million empty files count as
what they cost the filesystem, and a walk stops after a bounded number of entries), hard
links once. A directory the approach made unreadable is made readable again to be
measured (it is the worker's); one that still cannot be read counts as over the bound.
Between two measurements the approach may write more than the bound, by at most what it
can write in that interval (which is 0.5 s at first, and 10 times as long as one walk
takes, at most 30 s). A file deleted while still open is not seen; each such file is
still bounded by `file_size_mb`, and all of them by `open_files`, and they go when the
sandbox ends.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

__all__ = ["WorktreeGrowth", "WorktreeTooLarge", "used_bytes"]

_MIB = 1024 * 1024
_ENTRY_BYTES = 4096
_FIRST_INTERVAL = 0.5
_MAX_INTERVAL = 30.0


class WorktreeTooLarge(Exception):
    """The approach grew its worktree past the bound; its sandbox was killed."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def used_bytes(paths: Sequence[Path], stop_above: int) -> int:
    """The disk use under `paths` (see the module), or a number above `stop_above` as
    soon as it is known to exceed it (blocking: run it in a thread)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [os.fspath(path) for path in paths]
    while stack:
        path = stack.pop()
        try:
            info = os.lstat(path)
        except OSError:
            continue  # gone meanwhile
        key = (info.st_dev, info.st_ino)
        if key in seen:
            continue
        seen.add(key)
        total += max(info.st_blocks * 512, _ENTRY_BYTES)
        if total > stop_above:
            return total
        if stat.S_ISDIR(info.st_mode):
            entries = _entries(path, info.st_mode)
            if entries is None:
                return stop_above + 1  # cannot be measured: fail closed
            stack.extend(entries)
    return total


def _entries(path: str, mode: int) -> list[str] | None:
    for attempt in (1, 2):
        try:
            with os.scandir(path) as listing:
                return [entry.path for entry in listing]
        except FileNotFoundError:
            return []
        except PermissionError:
            if attempt == 2:
                return None
            try:
                os.chmod(path, stat.S_IMODE(mode) | stat.S_IRWXU)
            except OSError:
                return None
        except OSError:
            return None
    return None


class WorktreeGrowth:
    """The growth bound of one run: its paths, its baseline, and whether it was passed."""

    def __init__(self, paths: Sequence[Path], bound_mb: int, baseline: int, where: str) -> None:
        self.paths = tuple(paths)
        self.bound_mb = bound_mb
        self.baseline = baseline
        self.where = where  # the sandbox profile's name, for the reason
        self.exceeded = False

    @classmethod
    async def measured(cls, paths: Sequence[Path], bound_mb: int, where: str) -> WorktreeGrowth:
        """Measure the baseline (the whole checkout: not stopped early)."""
        baseline = await anyio.to_thread.run_sync(used_bytes, list(paths), 2**62)
        return cls(paths, bound_mb, baseline, where)

    @property
    def reason(self) -> str:
        return (
            f"the approach grew its worktree and objects by more than worktree_mb "
            f"({self.bound_mb} MiB) of sandbox profile {self.where}; it was stopped"
        )

    async def check(self) -> bool:
        """Measure now; True (and remembered) once over the bound."""
        if not self.exceeded:
            limit = self.baseline + self.bound_mb * _MIB
            used = await anyio.to_thread.run_sync(used_bytes, list(self.paths), limit)
            self.exceeded = used > limit
        return self.exceeded

    async def watch(self, stop: Callable[[], None]) -> None:
        """Measure until cancelled; call `stop` (kill the sandbox) once over the bound."""
        interval = _FIRST_INTERVAL
        while True:
            await anyio.sleep(interval)
            started = time.monotonic()
            if await self.check():
                stop()
                return
            interval = min(_MAX_INTERVAL, max(_FIRST_INTERVAL, 10 * (time.monotonic() - started)))
