"""The `command` approach: run the profile's argv in the run's sandbox, with a timeout.

No shell. The sandbox (sandbox/process.py) starts it in a session of its own and ends it
with everything it started, on success too: a timeout, a lost lease or a shutdown kills
the whole sandbox, and so does a worktree grown past its bound (sandbox/growth.py). Its
combined stdout/stderr is read as it comes (a full pipe would
stall it) and only the last `MAX_OUTPUT_BYTES` are kept, for the worker's debug log: the
output never enters a result, the outbox or Activity Core.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import anyio
from anyio.abc import Process

from rein_aharness.profiles.model import MAX_OUTPUT_BYTES, CommandSpec
from rein_aharness.sandbox import Sandbox
from rein_aharness.sandbox.growth import WorktreeTooLarge

__all__ = ["CommandOutcome", "approach_environment", "run_command", "run_in_sandbox"]


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


async def run_command(
    spec: CommandSpec, sandbox: Sandbox, env: Mapping[str, str]
) -> CommandOutcome:
    return await run_in_sandbox(spec.argv, spec.timeout_s, sandbox, env)


async def run_in_sandbox(
    argv: Sequence[str], timeout_s: float, sandbox: Sandbox, env: Mapping[str, str]
) -> CommandOutcome:
    """Run `argv` in `sandbox`; SandboxUnavailable if the sandbox cannot be created,
    WorktreeTooLarge if it grew the worktree past its bound (it was killed for it)."""
    tail = bytearray()
    total = 0
    growth = sandbox.growth
    async with sandbox.process(argv, env) as process:
        with anyio.move_on_after(timeout_s) as scope:
            async with anyio.create_task_group() as watching:
                if growth is not None:
                    watching.start_soon(growth.watch, partial(_kill, process))
                assert process.stdout is not None
                async for chunk in process.stdout:
                    total += len(chunk)
                    tail += chunk
                    if len(tail) > MAX_OUTPUT_BYTES:
                        del tail[: len(tail) - MAX_OUTPUT_BYTES]
                await process.wait()
                watching.cancel_scope.cancel()
        timed_out = scope.cancelled_caught
        returncode = None if timed_out else process.returncode
    if growth is not None and await growth.check():
        raise WorktreeTooLarge(growth.reason)
    return CommandOutcome(
        returncode=returncode,
        timed_out=timed_out,
        output_bytes=total,
        output_tail=bytes(tail),
    )


def _kill(process: Process) -> None:
    """End the sandbox now (its session: bwrap, and the sandbox dies with it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
