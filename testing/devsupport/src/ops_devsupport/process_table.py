"""The process table: who is alive, who descends from whom, who works where.

Pids are recycled, so a remembered process is a pid and its start time (`RememberedPid`): a kill
never reaches a stranger that took a dead child's pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = [
    "RememberedPid",
    "alive",
    "children",
    "command_line",
    "kill_all",
    "process_tree",
    "processes_with_environment",
    "processes_working_under",
    "snapshot",
]


@dataclass(frozen=True)
class RememberedPid:
    """A pid and its start time, so a recycled pid is never mistaken for it."""

    pid: int
    started: float

    def alive(self) -> bool:
        return _start_time(self.pid) == self.started


def _start_time(pid: int) -> float | None:
    """When the process started; None when it is gone or a zombie."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        started: float = process.create_time()
        return started
    except psutil.Error:
        return None


def command_line(pid: int) -> str | None:
    """The process's command line, its arguments joined by spaces; None when it is gone
    or not ours to read."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    return _start_time(pid) is not None


def children(pid: int) -> list[int]:
    """`pid`'s direct children, at this moment."""
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def processes_with_environment(**wanted: str) -> list[int]:
    """Pids of the processes (of those this user may read) whose environment holds every
    `NAME=value` given: how a run's processes are found, whatever namespace or working
    directory they ended up in."""
    found = []
    for process in psutil.process_iter():
        try:
            environ = process.environ()
        except psutil.Error:
            continue
        if all(environ.get(name) == value for name, value in wanted.items()):
            found.append(process.pid)
    return found


def processes_working_under(directories: Sequence[Path]) -> list[int]:
    """Pids of the processes whose working directory lies under any of `directories`."""
    roots = [directory.resolve() for directory in directories]
    found = []
    for process in psutil.process_iter():
        try:
            cwd = Path(process.cwd())
        except psutil.Error:
            continue
        if any(cwd == root or cwd.is_relative_to(root) for root in roots):
            found.append(process.pid)
    return found


def process_tree(root: int) -> list[int]:
    """`root`'s descendants (not `root`), by parent links, at this moment."""
    try:
        return [child.pid for child in psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return []


def snapshot(pids: Sequence[int]) -> list[RememberedPid]:
    taken = []
    for pid in pids:
        started = _start_time(pid)
        if started is not None:
            taken.append(RememberedPid(pid, started))
    return taken


def kill_all(pids: Sequence[RememberedPid]) -> None:
    for entry in pids:
        if entry.alive():
            with contextlib.suppress(OSError):
                os.kill(entry.pid, signal.SIGKILL)
