"""Start an approach's process inside its sandbox, and end it with everything it started.

    async with sandboxed_process(choice, bwrap, mounts, argv, env) as process:
        ... read process.stdout, wait ...

For a bwrap sandbox: bwrap is started in a session of its own and blocked before it runs
the approach; the worker reads the pid of the sandbox's first process from bwrap's status
fd, applies the resource bounds to it (limits.py), and only then lets it go on. If bwrap
reports no such process, or that process is gone before its bounds are set, the sandbox
could not be created (no user namespaces, a refused mount, a broken bwrap):
`SandboxUnavailable` carries bwrap's own first line of error, and nothing of the approach
ran. On the way out the whole sandbox is killed: bwrap's session
by SIGKILL, the sandbox with it (die-with-parent; its PID namespace ends with its first
process), and its cgroups (cgroups.py) are emptied and removed.

For kind `none` (development only) the approach is an ordinary child in its own session,
with no bounds but the time budget.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import Process

from ops_contracts import NetworkEgress
from rein_aharness.profiles import SandboxChoice
from rein_aharness.profiles.model import NetworkAllowlist
from rein_aharness.repository import Workspace
from rein_aharness.sandbox.bwrap import SystemPaths, bwrap_arguments, system_paths
from rein_aharness.sandbox.cgroups import SandboxCgroups
from rein_aharness.sandbox.egress import EgressMount, EgressUnavailable, attached_egress
from rein_aharness.sandbox.egress_log import ConnectionRecord, EgressLog
from rein_aharness.sandbox.gitview import sandbox_config
from rein_aharness.sandbox.growth import WorktreeGrowth
from rein_aharness.sandbox.layout import (
    GitMounts,
    SandboxMounts,
    approach_git_environment,
    dotgit_text,
)
from rein_aharness.sandbox.limits import SandboxLimitError, apply_rlimits, root_needs_cgroup
from rein_aharness.sandbox.result_file import RESULT_FILE, RESULT_FILE_NAME, make_report_dir
from rein_aharness.sandbox.secrets import secret_fds

__all__ = ["Sandbox", "SandboxUnavailable", "sandbox_over", "sandboxed_process"]

# How long bwrap may take to set the sandbox up before it counts as failed.
SETUP_TIMEOUT_SECONDS = 30.0
_REASON_CHARS = 300
_STATUS_LINE_BYTES = 4096


class SandboxUnavailable(Exception):
    """The sandbox could not be created; nothing of the approach ran."""

    def __init__(self, reason: str) -> None:
        self.reason = reason[:_REASON_CHARS]
        super().__init__(self.reason)


@dataclass(frozen=True)
class Sandbox:
    """One run's sandbox: its profile, the bwrap to use and what it mounts."""

    choice: SandboxChoice
    bwrap: Path | None
    mounts: SandboxMounts
    growth: WorktreeGrowth | None = None  # None: no repository (the start-up probe)
    # Every connection of every process of this sandbox through its egress proxy.
    egress: EgressLog = field(default_factory=EgressLog)

    def process(
        self, argv: Sequence[str], env: Mapping[str, str]
    ) -> AbstractAsyncContextManager[Process]:
        return sandboxed_process(
            self.choice, self.bwrap, self.mounts, argv, env, egress=self.egress
        )

    def network_evidence(self) -> NetworkEgress | None:
        """`network_egress` of the evidence: none without network, `open` unmeasured."""
        mode = self.choice.profile.network_mode if self.choice.confined else "none"
        if mode == "none":
            return None
        return NetworkEgress(mode="open") if mode == "open" else self.egress.evidence()

    def git_env(self) -> dict[str, str]:
        """The git variables an approach needs in this sandbox (objects, alternates)."""
        return approach_git_environment(self.mounts, confined=self.choice.confined)

    def result_file(self) -> str | None:
        """REIN_RESULT_FILE for an approach in this sandbox (the host path when unconfined)."""
        if self.mounts.report_dir is None:
            return None
        if self.choice.confined:
            return str(RESULT_FILE)
        return os.fspath(self.mounts.report_dir / RESULT_FILE_NAME)

    @property
    def evidence_name(self) -> str:
        return self.choice.evidence_name


async def sandbox_over(
    workspace: Workspace,
    choice: SandboxChoice,
    bwrap: Path | None,
    on_egress: Callable[[ConnectionRecord], None] | None = None,
) -> Sandbox:
    """The run's sandbox over its worktree; writes the `.git` file and the git config the
    sandbox shows (into the scratch directory, which the sandbox does not see), and
    measures the worktree's baseline for its growth bound (growth.py)."""
    workspace.dotgit_file.write_text(dotgit_text(workspace.admin_dir.name), encoding="utf-8")
    config_file = workspace.scratch / "config"
    await sandbox_config(workspace.repository.common_dir, config_file)
    git = GitMounts(
        common_dir=workspace.repository.common_dir,
        admin_dir=workspace.admin_dir,
        objects_dir=workspace.objects_dir,
        dotgit_file=workspace.dotgit_file,
        config_file=config_file,
    )
    report_dir = make_report_dir(workspace.scratch)
    growth = await WorktreeGrowth.measured(
        (workspace.path, workspace.admin_dir, workspace.objects_dir, report_dir),
        choice.profile.limits.worktree_mb,
        choice.name,
    )
    return Sandbox(
        choice, bwrap, SandboxMounts(workspace.path, git, report_dir), growth, EgressLog(on_egress)
    )


_system: SystemPaths | None = None


def _system_paths() -> SystemPaths:
    global _system
    if _system is None:
        _system = system_paths()
    return _system


@asynccontextmanager
async def sandboxed_process(
    choice: SandboxChoice,
    bwrap: Path | None,
    mounts: SandboxMounts,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    egress: EgressLog | None = None,
) -> AsyncIterator[Process]:
    """`egress`: where an allowlisted sandbox's proxy counts its connections."""
    if not choice.confined:
        process = await _open(list(argv), env, cwd=mounts.worktree)
        try:
            yield process
        finally:
            await _end(process)
        return
    if bwrap is None:
        raise SandboxUnavailable("no bwrap executable (set REIN_AHARNESS_BWRAP)")
    network = choice.profile.network
    if not isinstance(network, NetworkAllowlist):
        async with _bwrap_process(choice, bwrap, mounts, argv, env) as process:
            yield process
        return
    try:
        # The proxy outlives the process: the process's context ends (killed) first.
        async with attached_egress(network, egress or EgressLog()) as mount:
            wrapped, proxied = mount.wrap(argv), {**env, **mount.environment()}
            async with _bwrap_process(choice, bwrap, mounts, wrapped, proxied, mount) as process:
                yield process
    except EgressUnavailable as exc:
        raise SandboxUnavailable(str(exc)) from None


async def _open(
    args: list[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
) -> Process:
    return await anyio.open_process(
        args,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=pass_fds,
    )


@asynccontextmanager
async def _bwrap_process(
    choice: SandboxChoice,
    bwrap: Path,
    mounts: SandboxMounts,
    argv: Sequence[str],
    env: Mapping[str, str],
    egress: EgressMount | None = None,
) -> AsyncIterator[Process]:
    block_read, block_write = os.pipe2(os.O_CLOEXEC)
    status_read, status_write = os.pipe2(os.O_CLOEXEC)
    cgroup: SandboxCgroups | None = None
    process: Process | None = None
    try:
        cgroup = SandboxCgroups.create(choice.profile.limits, pids=root_needs_cgroup())
        # The secrets' memfds live only until bwrap has started (it copies them before
        # it blocks on block_fd); the worker keeps no other copy on any disk.
        with secret_fds(mounts.secrets) as fds:
            args = bwrap_arguments(
                bwrap,
                choice.profile,
                mounts,
                argv,
                system=_system_paths(),
                block_fd=block_read,
                status_fd=status_write,
                secret_fds=fds,
                egress=egress,
            )
            try:
                process = await _open(args, env, pass_fds=(block_read, status_write, *fds))
            except OSError as exc:
                raise SandboxUnavailable(f"cannot start {bwrap}: {exc.strerror}") from None
        os.close(block_read)
        os.close(status_write)
        block_read = status_write = -1
        child = await _first_child(status_read)
        if child is None:
            raise SandboxUnavailable(await _bwrap_error(process))
        try:
            apply_rlimits(child, choice.profile.limits)
            cgroup.add(child)
        except SandboxLimitError as exc:
            if exc.process_gone:
                # bwrap reported its first process and then failed setting it up (a
                # refused mount, say): its own error says why, not the missing process.
                raise SandboxUnavailable(await _bwrap_error(process)) from None
            raise
        try:
            os.write(block_write, b"go")
        except OSError:
            raise SandboxUnavailable(await _bwrap_error(process)) from None
        yield process
    except SandboxLimitError as exc:
        raise SandboxUnavailable(str(exc)) from None
    finally:
        with anyio.CancelScope(shield=True):
            for fd in (block_read, block_write, status_read, status_write):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            if process is not None:
                await _end(process)
            if cgroup is not None:
                await anyio.to_thread.run_sync(cgroup.remove)


async def _first_child(status_fd: int) -> int | None:
    """The pid bwrap reports for the sandbox's first process; None if it reports none."""
    os.set_blocking(status_fd, False)
    line = b""
    with anyio.move_on_after(SETUP_TIMEOUT_SECONDS):
        while b"\n" not in line and len(line) < _STATUS_LINE_BYTES:
            await anyio.wait_readable(status_fd)
            try:
                chunk = os.read(status_fd, _STATUS_LINE_BYTES)
            except BlockingIOError:
                continue
            if not chunk:
                break
            line += chunk
    try:
        status = json.loads(line.split(b"\n", 1)[0])
    except ValueError:
        return None
    pid = status.get("child-pid") if isinstance(status, dict) else None
    return pid if isinstance(pid, int) and pid > 0 else None


async def _bwrap_error(process: Process) -> str:
    """bwrap's first line of error, after it ended (or was ended)."""
    with anyio.move_on_after(5):
        assert process.stdout is not None
        output = b""
        async for chunk in process.stdout:
            output += chunk
            if len(output) > 4096:
                break
        lines = [ln for ln in output.decode("utf-8", "replace").splitlines() if ln.strip()]
        if lines:
            return f"bwrap failed: {lines[0].strip()}"
    return "bwrap failed before the sandbox existed"


async def _end(process: Process) -> None:
    """SIGKILL the process's session (a bwrap sandbox dies with it) and reap it."""
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        await process.aclose()
