"""`activity-core serve` as a separate process: started, waited for, stopped, its log read.

The child gets SIGTERM when the bench dies (even by SIGKILL, on Linux), and its pid is in
LEFTOVERS until it has been stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from activity_core.temporal.dev_server import free_port
from claim_bench.drivers import Worker
from claim_bench.errors import BenchError
from claim_bench.plan import LEASE_SECONDS, MAX_ATTEMPTS
from claim_bench.scratch import LEFTOVERS, sigint_ignored

__all__ = [
    "OWN_VARIABLES",
    "ApiServer",
    "api_server",
    "serve_command",
    "server_log_note",
    "stop_process",
    "wait_ready",
]


def _die_with_parent(parent: int) -> Callable[[], None]:
    """In the child: SIGTERM when the benchmark dies, even by SIGKILL (Linux)."""

    def setup() -> None:
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return setup


_SERVE_ENTRY = "import sys; from activity_core.cli import main; sys.exit(main(sys.argv[1:]))"


def serve_command(
    host: str, port: int, profile: Path | None, workdir: Path, workers: int = 1
) -> list[str]:
    """`activity-core serve`, under cProfile when asked (the profile is written on exit)."""
    serve = ["serve", "--host", host, "--port", str(port), "--workers", str(workers)]
    script = Path(sys.executable).with_name("activity-core")
    if profile is not None:
        # Not the console script: it ends the process with os._exit once temporalio is
        # loaded (cli.console_main), before cProfile could write the profile.
        entry = workdir / "serve_entry.py"
        entry.write_text(_SERVE_ENTRY + "\n")
        return [sys.executable, "-m", "cProfile", "-o", str(profile), str(entry), *serve]
    if script.exists():
        return [str(script), *serve]
    return [sys.executable, "-c", _SERVE_ENTRY, *serve]


# Identity and database come from the benchmark; every other ACTIVITY_CORE_* / OPS_RUN_*
# setting of the caller's environment passes through, so a setting can be tried out.
OWN_VARIABLES = (
    "ACTIVITY_CORE_DATABASE_URL",
    "ACTIVITY_CORE_OPERATOR_TOKEN",
    "ACTIVITY_CORE_WORKER_TOKEN",
    "ACTIVITY_CORE_WORKER_ID",
    "ACTIVITY_CORE_WORKER_CREDENTIALS_FILE",
    "ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS",
    "OPS_RUN_LEASE_SECONDS",
    "OPS_RUN_MAX_ATTEMPTS",
)


@dataclass
class ApiServer:
    base_url: str
    pid: int
    workers: list[Worker]
    log_path: Path


@contextlib.asynccontextmanager
async def api_server(
    dsn: str,
    workdir: Path,
    fleet: int,
    profile: Path | None,
    api_workers: int = 1,
    *,
    worker_prefix: str = "bench-worker",
) -> AsyncIterator[ApiServer]:
    workers = [Worker(f"{worker_prefix}-{i:02d}", secrets.token_urlsafe(24)) for i in range(fleet)]
    credentials = workdir / "workers.json"
    credentials.write_text(
        json.dumps(
            {
                "workers": {
                    w.worker_id: "sha256:" + hashlib.sha256(w.token.encode()).hexdigest()
                    for w in workers
                }
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in OWN_VARIABLES}
    env.update(
        {
            "ACTIVITY_CORE_DATABASE_URL": dsn,
            "ACTIVITY_CORE_OPERATOR_TOKEN": secrets.token_urlsafe(24),
            "ACTIVITY_CORE_WORKER_CREDENTIALS_FILE": str(credentials),
            "OPS_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "OPS_RUN_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
        }
    )
    port = free_port()
    log_path = workdir / "activity-core.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            *serve_command("127.0.0.1", port, profile, workdir, api_workers),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )
    LEFTOVERS.pids.add(proc.pid)
    base_url = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(base_url, proc, log_path)
        yield ApiServer(base_url, proc.pid, workers, log_path)
    finally:
        with sigint_ignored():
            await stop_process(proc)


async def wait_ready(base_url: str, proc: asyncio.subprocess.Process, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=base_url, timeout=2, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get("/readyz")).status_code == 200:
                    return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 0.2)
    tail = log_path.read_text(errors="replace").splitlines()[-15:]
    raise BenchError("activity-core serve did not become ready:\n    " + "\n    ".join(tail))


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    """SIGINT (uvicorn shuts down gracefully and, under cProfile, the profile is written),
    then SIGTERM, then SIGKILL."""
    for sig, grace in ((signal.SIGINT, 20.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.returncode is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace)
    LEFTOVERS.pids.discard(proc.pid)


def server_log_note(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines()
    problems = [ln for ln in lines if '"level":"ERROR"' in ln or "Traceback" in ln]
    return f"server log: {len(lines):,} lines, {len(problems)} errors" + (
        f" (first: {problems[0][:200]})" if problems else ""
    )
