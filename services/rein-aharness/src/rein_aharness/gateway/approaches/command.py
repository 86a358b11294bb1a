"""The `command` approach: run the profile's argv in the run's worktree, with a timeout.

No shell. The process gets its own session (process group), so a timeout, a lost lease
or a shutdown kills it and everything it started. Its combined stdout/stderr is read as
it comes (a full pipe would stall it) and only the last `MAX_OUTPUT_BYTES` are kept, for
the worker's debug log: the output never enters a result, the outbox or Activity Core.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process

from rein_aharness.profiles.model import MAX_OUTPUT_BYTES, CommandSpec

__all__ = ["CommandOutcome", "approach_environment", "run_command"]


@dataclass(frozen=True)
class CommandOutcome:
    returncode: int | None  # None when it was killed for the timeout
    timed_out: bool
    output_bytes: int  # how much it wrote in all
    output_tail: bytes  # the last MAX_OUTPUT_BYTES of it: debug log only


def approach_environment(
    spec: CommandSpec, worker_environ: Mapping[str, str], run_vars: Mapping[str, str]
) -> dict[str, str]:
    """Exactly the allowlisted variables the worker has, then the run's own variables."""
    env = {name: worker_environ[name] for name in spec.env_allowlist if name in worker_environ}
    env.update(run_vars)
    return env


async def run_command(spec: CommandSpec, cwd: Path, env: Mapping[str, str]) -> CommandOutcome:
    process = await anyio.open_process(
        list(spec.argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    tail = bytearray()
    total = 0
    try:
        with anyio.move_on_after(spec.timeout_s) as scope:
            assert process.stdout is not None
            async for chunk in process.stdout:
                total += len(chunk)
                tail += chunk
                if len(tail) > MAX_OUTPUT_BYTES:
                    del tail[: len(tail) - MAX_OUTPUT_BYTES]
            await process.wait()
        timed_out = scope.cancelled_caught
    finally:
        # Also on success: a background child of the command must not outlive the run.
        with anyio.CancelScope(shield=True):
            await _kill_group(process)
    return CommandOutcome(
        returncode=None if timed_out else process.returncode,
        timed_out=timed_out,
        output_bytes=total,
        output_tail=bytes(tail),
    )


async def _kill_group(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    await process.aclose()
