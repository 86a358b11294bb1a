"""`activity-core` as a real process: `serve` on the test database, for the tests that drive
it over HTTP (the operator CLIs, `serve --workers`): started on a free port with an
environment of only what it is given, ready when /readyz says so, stopped with SIGTERM
(SIGKILL to its process group if it does not stop); and any command run to its end,
with an environment cleaned of the service's variables."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from ac_testkit import OPERATOR_TOKEN
from activity_core.temporal.dev_server import free_port
from ops_devsupport.processes import console_script, run_console_script

EXECUTABLE = console_script("activity-core")


@dataclass
class Done:
    """What a CLI run printed and returned."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def serve_env(db_dsn: str, **settings: str) -> dict[str, str]:
    """This process's environment without any of the service's own variables, plus the
    test database and `settings`."""
    return env_without(
        ("ACTIVITY_CORE_", "OPS_RUN_", "PROMETHEUS_"),
        ACTIVITY_CORE_DATABASE_URL=db_dsn,
        ACTIVITY_CORE_LOG_LEVEL="WARNING",
        **settings,
    )


async def operator_cli(
    main: Callable[..., int],
    url: str | None,
    *argv: str,
    token: str | None = OPERATOR_TOKEN,
    **env: str,
) -> Done:
    """An operator CLI's `main(argv)` run in a thread against the API at `url` with the
    operator `token` (None: neither set), `env` added to its environment."""
    environ = {"NO_PROXY": "*", **env}
    if url is not None:
        environ["ACTIVITY_CORE_API_URL"] = url
    if token is not None:
        environ["ACTIVITY_CORE_OPERATOR_TOKEN"] = token
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(main, list(argv), environ=environ, out=out, err=err)
    return Done(code, out.getvalue(), err.getvalue())


@asynccontextmanager
async def serve_process(
    env: dict[str, str], *args: str
) -> AsyncIterator[tuple[subprocess.Popen[str], str]]:
    """`activity-core serve --port <free> *args`: (the process, its base URL) once ready."""
    port = free_port()
    proc = subprocess.Popen(
        [str(EXECUTABLE), "serve", "--port", str(port), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=url, timeout=2, trust_env=False) as probe:
            while True:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, f"serve {' '.join(args)} did not become ready"
                try:
                    if (await probe.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def env_without(prefixes: tuple[str, ...], **values: str) -> dict[str, str]:
    """This process's environment without the variables whose names start with one of
    `prefixes`, plus `values`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(values)
    return env


def clean_env(**extra: str) -> dict[str, str]:
    return env_without(
        ("ACTIVITY_CORE_", "OPS_RUN_", "STATE_HUB", "TEMPORAL_", "FORGEJO_"), **extra
    )


def temporal_cli_env(**values: str) -> dict[str, str]:
    """The environment of an `activity-core` command run against the Temporal dev server:
    none of the service's, Temporal's or the state hub's variables but `values`."""
    return env_without(("ACTIVITY_CORE_", "OPS_RUN_", "TEMPORAL_", "STATE_HUB"), **values)


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_console_script("activity-core", *args, env=env)


def assert_stopped_naming(completed: subprocess.CompletedProcess[str], variable: str) -> str:
    assert completed.returncode == 2, completed
    assert "Traceback" not in completed.stderr + completed.stdout
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"activity-core: {variable}: "), lines[0]
    assert "database" not in lines[0]
    assert completed.stdout == ""
    return lines[0]
