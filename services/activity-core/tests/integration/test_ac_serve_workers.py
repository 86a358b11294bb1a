"""`activity-core serve --workers N` as a real process: N workers on one port, one supervisor.

Each worker accepts on the socket the supervisor bound, /metrics sums every worker's
samples whichever worker answers, SIGTERM stops them all, and a worker that dies takes
the unit down (exit 1) instead of leaving a half-alive API.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from ac_serve import EXECUTABLE, serve_env, serve_process
from ac_testkit import SeededQueue
from activity_core.db.pool import init_connection
from ops_devsupport.processes import alive, children, command_line

OPERATOR_TOKEN = "operator-token-for-workers-test"
WORKER_ID = "rein-aharness@workers-test"
WORKER_TOKEN = "worker-token-for-workers-test-0123"


def _children(pid: int) -> set[int]:
    return set(children(pid))


def _alive(pid: int) -> bool:
    return alive(pid)


@dataclass
class Served:
    proc: subprocess.Popen[str]
    base_url: str
    workers: list[int]

    def client(self) -> httpx.AsyncClient:
        # No keep-alive: every request is a new connection, so the kernel spreads them
        # over the workers.
        return httpx.AsyncClient(
            base_url=self.base_url,
            limits=httpx.Limits(max_keepalive_connections=0),
            timeout=10,
            trust_env=False,
        )


def _serve_env(db_dsn: str) -> dict[str, str]:
    return serve_env(
        db_dsn,
        ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ACTIVITY_CORE_WORKER_TOKEN=WORKER_TOKEN,
        ACTIVITY_CORE_WORKER_ID=WORKER_ID,
    )


@pytest.fixture
async def served(db_dsn: str) -> AsyncIterator[Served]:
    async with serve_process(_serve_env(db_dsn), "--workers", "2") as (proc, base_url):
        # the supervisor's children: two workers (and multiprocessing's resource tracker)
        workers = [pid for pid in _children(proc.pid) if "spawn_main" in _cmdline(pid)]
        yield Served(proc, base_url, workers)


def _cmdline(pid: int) -> str:
    return command_line(pid) or ""


_CLAIMED = re.compile(r"^ops_runs_claimed_total ([0-9.e+]+)$", re.MULTILINE)


async def test_two_workers_serve_one_port_and_metrics_count_both(
    served: Served, db_dsn: str
) -> None:
    assert len(served.workers) == 2, served.workers
    conn = await asyncpg.connect(db_dsn)
    try:
        await init_connection(conn)
        await SeededQueue(conn).runs(12)
    finally:
        await conn.close()
    worker = {"Authorization": f"Bearer {WORKER_TOKEN}"}
    claimed: list[str] = []
    async with served.client() as client:
        for _ in range(12):
            response = await client.post(
                "/ops-runs/claim", json={"worker_id": WORKER_ID}, headers=worker
            )
            assert response.status_code == 200, response.text
            # no header names the server software; the Date header is there (RFC 9110)
            assert "server" not in response.headers
            assert "date" in response.headers
            claimed += [run["id"] for run in response.json()["runs"]]
        assert len(claimed) == len(set(claimed)) == 12
        # whichever worker answers the scrape reports every worker's claims
        for _ in range(6):
            metrics = await client.get("/metrics")
            assert metrics.status_code == 200
            match = _CLAIMED.search(metrics.text)
            assert match is not None, metrics.text
            assert float(match.group(1)) == 12.0


async def test_sigterm_stops_every_worker_and_exits_0(served: Served) -> None:
    served.proc.send_signal(signal.SIGTERM)
    _, err = served.proc.communicate(timeout=30)
    assert served.proc.returncode == 0, err
    assert "Traceback" not in err
    assert not [pid for pid in served.workers if _alive(pid)]


async def test_a_worker_that_dies_stops_the_unit_with_exit_1(served: Served) -> None:
    os.kill(served.workers[0], signal.SIGKILL)
    _, err = served.proc.communicate(timeout=30)
    assert served.proc.returncode == 1
    assert f"worker process {served.workers[0]} exited" in err
    assert not [pid for pid in served.workers if _alive(pid)]


def _metrics_dirs(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"activity-core-metrics-{pid}-*"))


async def test_workers_stop_when_the_supervisor_is_killed(served: Served, db_dsn: str) -> None:
    assert len(_metrics_dirs(served.proc.pid)) == 1
    served.proc.kill()  # the supervisor only, as an OOM killer would
    served.proc.wait(timeout=10)
    deadline = time.monotonic() + 20
    while [pid for pid in served.workers if _alive(pid)]:
        assert time.monotonic() < deadline, "workers outlived their supervisor"
        await asyncio.sleep(0.2)
    # the killed supervisor's metrics directory is left behind; the next supervisor on the
    # machine removes it (a refused start is enough: it cleans up before listening)
    assert len(_metrics_dirs(served.proc.pid)) == 1
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        _serve_once(_serve_env(db_dsn), "--port", str(taken.getsockname()[1]), "--workers", "2")
    assert _metrics_dirs(served.proc.pid) == []


def _serve_once(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`serve` expected to stop by itself (a refused start)."""
    return subprocess.run(
        [str(EXECUTABLE), "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


async def test_a_port_taken_by_another_process_is_exit_1_and_a_clear_line(db_dsn: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        completed = _serve_once(_serve_env(db_dsn), "--port", str(port), "--workers", "2")
    assert completed.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_workers_need_a_fixed_port(db_dsn: str) -> None:
    completed = _serve_once(_serve_env(db_dsn), "--port", "0", "--workers", "2")
    assert completed.returncode == 1
    assert "--workers needs a fixed --port" in completed.stderr


@pytest.mark.parametrize("value", ["0", "65", "two"])
def test_a_bad_worker_count_is_a_usage_error(value: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTIVITY_CORE_")}
    completed = _serve_once(env, "--workers", value)
    assert completed.returncode == 2
    assert "--workers" in completed.stderr
    assert "Traceback" not in completed.stderr
