"""Resource bounds of a sandboxed approach, applied to its first process before it runs.

bwrap holds the sandbox's first process until the worker has set the bounds on it
(`--block-fd`), so every process the approach starts inherits them; no window exists in
which it runs unbounded. Each bound is a hard limit (the approach cannot raise it: it has
no capabilities). CPU seconds, address space, file size and open files are rlimits.

The process bound is RLIMIT_NPROC, counted per user namespace (Linux 5.14+), so only the
sandbox's own processes count. The kernel exempts root from RLIMIT_NPROC, though, so a
worker running as root bounds processes with a pids cgroup of its own instead; where it
cannot create one, the sandbox is unavailable (fail closed), never unbounded.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import resource
import signal
import time
from pathlib import Path

from rein_aharness.profiles import SandboxLimits

__all__ = ["PidsCgroup", "SandboxLimitError", "apply_rlimits", "rlimits", "root_needs_cgroup"]

_MIB = 1024 * 1024
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_names = itertools.count()
_PREFIX = "rein-aharness-sandbox-"


class SandboxLimitError(Exception):
    """A bound could not be applied; the sandbox must not run.

    `process_gone` says the process had already ended: bwrap reported its first
    process and then failed on its own, so bwrap's error is the cause, not the bound.
    """

    def __init__(self, message: str, *, process_gone: bool = False) -> None:
        super().__init__(message)
        self.process_gone = process_gone


def rlimits(limits: SandboxLimits) -> list[tuple[int, int]]:
    """(resource, value) of every rlimit bound (pure)."""
    return [
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_AS, limits.address_space_mb * _MIB),
        (resource.RLIMIT_NPROC, limits.processes),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * _MIB),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
    ]


def apply_rlimits(pid: int, limits: SandboxLimits) -> None:
    """Set every bound, soft = hard, on `pid`; never above the hard limit it already has."""
    try:
        for which, value in rlimits(limits):
            _soft, hard = resource.prlimit(pid, which)
            bound = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.prlimit(pid, which, (bound, bound))
    except OSError as exc:
        raise SandboxLimitError(
            f"cannot bound the sandbox's resources: {exc.strerror}",
            process_gone=exc.errno == errno.ESRCH,
        ) from None


def root_needs_cgroup() -> bool:
    return os.geteuid() == 0


def _own_pids_cgroup(proc_self: Path = Path("/proc/self/cgroup")) -> Path | None:
    """The directory of this process's pids cgroup (cgroup v1 `pids`, else v2), if any."""
    try:
        lines = proc_self.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    v2: Path | None = None
    for line in lines:
        _hierarchy, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if "pids" in controllers.split(","):
            return _CGROUP_ROOT / "pids" / relative
        if controllers == "" and (_CGROUP_ROOT / "cgroup.controllers").exists():
            v2 = _CGROUP_ROOT / relative
    return v2


class PidsCgroup:
    """A pids cgroup of one sandbox, below the worker's own; removed after the run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> PidsCgroup:
        parent = _own_pids_cgroup()
        if parent is None:
            raise SandboxLimitError(
                "running as root, the process bound needs a pids cgroup, and this process has none"
            )
        _remove_stale(parent)
        path = parent / f"{_PREFIX}{os.getpid()}-{next(_names)}"
        try:
            path.mkdir()
        except OSError as exc:
            raise SandboxLimitError(
                f"running as root, the process bound needs a pids cgroup: cannot create one "
                f"under {parent}: {exc.strerror}"
            ) from None
        cgroup = cls(path)
        try:
            (path / "pids.max").write_text(str(max_pids), encoding="ascii")
        except OSError as exc:
            cgroup.remove()
            raise SandboxLimitError(f"cannot set pids.max of {path}: {exc.strerror}") from None
        return cgroup

    def add(self, pid: int) -> None:
        try:
            (self.path / "cgroup.procs").write_text(str(pid), encoding="ascii")
        except OSError as exc:
            raise SandboxLimitError(
                f"cannot move the sandbox into {self.path}: {exc.strerror}",
                process_gone=exc.errno == errno.ESRCH,
            ) from None

    def remove(self) -> None:
        """Kill whatever is still in it, then remove it (best effort, never raises).

        A process killed a moment ago may still be attached while it exits, so removal
        is retried: quickly at first (the usual case is a few ms), for 2 s at most.
        """
        delay = 0.001
        deadline = time.monotonic() + 2.0
        while True:
            try:
                pids = (self.path / "cgroup.procs").read_text(encoding="ascii").split()
            except OSError:
                pids = []
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(delay)
                delay = min(delay * 2, 0.05)


def _remove_stale(parent: Path) -> None:
    """Remove the sandbox cgroups of worker processes that no longer exist (killed)."""
    try:
        entries = [entry for entry in parent.iterdir() if entry.name.startswith(_PREFIX)]
    except OSError:
        return
    for entry in entries:
        owner = entry.name.removeprefix(_PREFIX).split("-", 1)[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            PidsCgroup(entry).remove()
        except OSError:
            continue
