"""The cgroups of one sandbox: a process bound for a root worker, a memory bound where
the node offers one.

The sandbox's first process is moved in before bwrap lets it run (`--block-fd`), so
everything the approach starts is inside. Each sandbox gets a child of the worker's own
cgroup, named `rein-aharness-sandbox-<worker pid>-<n>`, removed after the run (and, for
a worker that was killed, by the next worker that finds it).

- pids, when the worker is root: `pids.max` (v1: in the pids hierarchy);
- memory, where the controller is delegated to the worker: v1 `memory.limit_in_bytes`
  (and `memory.memsw.limit_in_bytes` where swap is accounted), v2 `memory.max` (and
  `memory.swap.max` 0).

The process bound is required: a root worker that cannot create it has no sandbox (the
kernel exempts root from RLIMIT_NPROC; fail closed). The memory bound is the profile's
`address_space_mb` for the whole sandbox, its tmpfs files included (the kernel charges
tmpfs pages to the cgroup of the process that wrote them): where the node has no memory
controller the worker can write (cgroup v2: the worker's cgroup must list `memory` in its
`cgroup.subtree_control`), the worker says so once in a log line and the sandbox runs with
the per-process and per-tmpfs bounds only.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rein_aharness.profiles import SandboxLimits
from rein_aharness.sandbox.limits import SandboxLimitError

__all__ = ["CgroupPlaces", "SandboxCgroups", "cgroup_places", "remove_stale"]

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_PREFIX = "rein-aharness-sandbox-"
_names = itertools.count()
_memory_skip_logged: set[str] = set()


@dataclass(frozen=True)
class CgroupPlaces:
    """Where this process's cgroups are, per controller (v1), and its v2 cgroup."""

    v1: dict[str, Path]  # controller -> this process's directory in its hierarchy
    v2: Path | None  # this process's directory in the unified hierarchy, if mounted

    def parent_for(self, controller: str) -> tuple[Path, int] | None:
        """(directory, version) under which a child cgroup has `controller`, if any."""
        if controller in self.v1:
            return self.v1[controller], 1
        if self.v2 is not None and controller in _words(self.v2 / "cgroup.subtree_control"):
            return self.v2, 2
        return None

    def why_not(self, controller: str) -> str:
        if self.v2 is None:
            return f"no {controller} controller (neither a cgroup v1 hierarchy nor cgroup v2)"
        return (
            f"{self.v2} does not delegate the {controller} controller to its children "
            f"(not in its cgroup.subtree_control)"
        )


def _words(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").split()
    except OSError:
        return []


def cgroup_places(
    proc_self: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> CgroupPlaces:
    """This process's cgroups, from /proc/self/cgroup and the mounted hierarchies."""
    try:
        lines = proc_self.read_text(encoding="utf-8").splitlines()
    except OSError:
        return CgroupPlaces({}, None)
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in lines:
        _hierarchy, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            # pure v2 at the root, or the hybrid layout's unified hierarchy
            for mount in (root, root / "unified"):
                if (mount / "cgroup.controllers").exists():
                    v2 = mount / relative
                    break
            continue
        for controller in controllers.split(","):
            if controller in ("pids", "memory") and (root / controller).is_dir():
                v1[controller] = root / controller / relative
    return CgroupPlaces(v1, v2)


class SandboxCgroups:
    """The cgroup directories of one sandbox (one per v1 hierarchy, or one v2 cgroup)."""

    def __init__(self, paths: list[Path], *, memory: bool) -> None:
        self.paths = paths
        self.memory = memory  # whether a memory bound applies

    @classmethod
    def create(
        cls, limits: SandboxLimits, *, pids: bool, places: CgroupPlaces | None = None
    ) -> SandboxCgroups:
        """The sandbox's cgroups: a pids bound if `pids` (required), a memory bound where
        the node offers one (skipped, with one log line, where not)."""
        places = cgroup_places() if places is None else places
        name = f"{_PREFIX}{os.getpid()}-{next(_names)}"
        made = cls([], memory=False)
        try:
            if pids:
                made._bound("pids", name, places, [("pids.max", str(limits.processes), True)])
            memory = limits.address_space_mb * _MIB
            try:
                made._bound("memory", name, places, _memory_settings(memory, places))
                made.memory = True
            except SandboxLimitError as exc:
                _log_memory_skip(str(exc))
        except BaseException:
            made.remove()
            raise
        return made

    def _bound(
        self,
        controller: str,
        name: str,
        places: CgroupPlaces,
        settings: list[tuple[str, str, bool]],
    ) -> None:
        """Create (or reuse, v2) the child cgroup for `controller` and write `settings`
        (file, value, required: an optional file is written only where it exists)."""
        where = places.parent_for(controller)
        if where is None:
            raise SandboxLimitError(places.why_not(controller))
        path = where[0] / name
        created = path not in self.paths
        if created:
            remove_stale(where[0])
            try:
                path.mkdir()
            except OSError as exc:
                raise SandboxLimitError(
                    f"cannot create a {controller} cgroup under {where[0]}: {exc.strerror}"
                ) from None
            self.paths.append(path)
        for file, value, required in settings:
            target = path / file
            if not required and not target.exists():
                continue
            try:
                target.write_text(value, encoding="utf-8")
            except OSError as exc:
                if created:
                    self.paths.remove(path)
                    _remove(path)
                raise SandboxLimitError(f"cannot set {file} of {path}: {exc.strerror}") from None

    def add(self, pid: int) -> None:
        for path in self.paths:
            try:
                (path / "cgroup.procs").write_text(str(pid), encoding="utf-8")
            except OSError as exc:
                raise SandboxLimitError(
                    f"cannot move the sandbox into {path}: {exc.strerror}",
                    process_gone=exc.errno == errno.ESRCH,
                ) from None

    def remove(self) -> None:
        for path in self.paths:
            _remove(path)


def _memory_settings(limit: int, places: CgroupPlaces) -> list[tuple[str, str, bool]]:
    """The memory bound; swap may not extend it (where the node accounts swap)."""
    where = places.parent_for("memory")
    if where is not None and where[1] == 1:
        return [
            ("memory.limit_in_bytes", str(limit), True),
            ("memory.memsw.limit_in_bytes", str(limit), False),
        ]
    return [("memory.max", str(limit), True), ("memory.swap.max", "0", False)]


def _log_memory_skip(reason: str) -> None:
    if reason not in _memory_skip_logged:
        _memory_skip_logged.add(reason)
        log.warning(
            "no memory cgroup for the sandbox (%s): its memory is bounded per process "
            "(address_space_mb) and per tmpfs (tmpfs_mb) only",
            reason,
        )


def _remove(path: Path) -> None:
    """Kill whatever is still in it, then remove it (best effort, never raises).

    A process killed a moment ago may still be attached while it exits, so removal is
    retried: quickly at first (the usual case is a few ms), for 2 s at most.
    """
    delay = 0.001
    deadline = time.monotonic() + 2.0
    while True:
        try:
            pids = (path / "cgroup.procs").read_text(encoding="utf-8").split()
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def remove_stale(parent: Path) -> None:
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
            _remove(entry)
        except OSError:
            continue
