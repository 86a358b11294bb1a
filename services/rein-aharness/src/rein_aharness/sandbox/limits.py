"""Resource bounds of a sandboxed approach, applied to its first process before it runs.

bwrap holds the sandbox's first process until the worker has set the bounds on it
(`--block-fd`), so every process the approach starts inherits them; no window exists in
which it runs unbounded. Each bound is a hard limit (the approach cannot raise it: it has
no capabilities). CPU seconds, address space, file size and open files are rlimits.

The process bound is RLIMIT_NPROC, counted per user namespace (Linux 5.14+), so only the
sandbox's own processes count. The kernel exempts root from RLIMIT_NPROC, though, so a
worker running as root bounds processes with a pids cgroup of its own instead; where it
cannot create one, the sandbox is unavailable (fail closed), never unbounded. The cgroups
(that one, and a memory cgroup where the node offers one) are in cgroups.py.
"""

from __future__ import annotations

import errno
import os
import resource

from rein_aharness.profiles import SandboxLimits

__all__ = ["SandboxLimitError", "apply_rlimits", "rlimits", "root_needs_cgroup"]

_MIB = 1024 * 1024


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
