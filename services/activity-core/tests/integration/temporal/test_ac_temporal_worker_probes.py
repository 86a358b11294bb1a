"""`activity-core temporal-worker`'s endpoints, in a real process on a real dev server:

- `/livez` answers 200 while the worker's event loop runs, also while it idles for longer
  than the limit, and 503 within the limit once something blocks the loop, while the
  process is still there. To block the loop the test runs the real CLI under a tiny entry
  that installs a SIGUSR1 handler sleeping for a minute: Python runs signal handlers on the
  main thread, the event loop's, so the handler is a synchronous call that does not return.
  The liveness thread is left alone (SIGSTOP would freeze it too).
- the SDK's Prometheus endpoint carries every metric the monitoring component's dashboard
  uses (worker_endpoints.TEMPORAL_SDK_METRICS).
- `/readyz` on the same address is 503 until the server lists this process's pollers on
  both of its task queue's types, then 200; 503 `temporal_unreachable` once its Temporal
  is gone (the process alive, `/livez` still 200), and 200 again when Temporal is back.
  The test runs a dev server of its own for this, stopped and restarted on its port.
- bad values stop the command with one line naming the variable and exit 2, before any
  database or Temporal connection.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ac_serve import temporal_cli_env
from activity_core.temporal.dev_server import DevServer, free_port, start_dev_server
from activity_core.temporal.worker_endpoints import TEMPORAL_SDK_METRICS
from ops_testsupport.liveness import stall_and_watch, stalling_entry

MAX_STALL = 2.0
ENTRY = stalling_entry("from activity_core.cli import console_main", "console_main()")


@pytest.fixture
def worker_log(tmp_path: Path) -> Path:
    return tmp_path / "temporal-worker.log"


@pytest.fixture
def started(
    temporal_server: DevServer, db_dsn: str, worker_log: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    liveness, metrics = free_port(), free_port()
    env = temporal_cli_env(
        ACTIVITY_CORE_DATABASE_URL=db_dsn,
        ACTIVITY_CORE_ISSUE_SINK="none",
        TEMPORAL_ADDRESS=temporal_server.address,
        TEMPORAL_TASK_QUEUE=f"ac-probes-{uuid.uuid4().hex[:10]}",
        ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS=f"127.0.0.1:{liveness}",
        ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_MAX_STALL_SECONDS=str(MAX_STALL),
        ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS=f"127.0.0.1:{metrics}",
    )
    with worker_log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "temporal-worker"], env=env, stdout=out, stderr=out
        )
    try:
        yield (
            process,
            f"http://127.0.0.1:{liveness}/livez",
            f"http://127.0.0.1:{metrics}/metrics",
        )
    finally:
        process.kill()
        process.wait(timeout=10)


async def _until_polling(process: subprocess.Popen[bytes], log: Path) -> None:
    async with asyncio.timeout(60):
        while "temporal worker on task queue" not in log.read_text():
            assert process.poll() is None, log.read_text()
            await asyncio.sleep(0.1)


async def test_livez_follows_the_event_loop_and_the_sdk_metrics_are_served(
    started: tuple[subprocess.Popen[bytes], str, str], worker_log: Path
) -> None:
    process, livez, metrics = started
    await _until_polling(process, worker_log)
    async with httpx.AsyncClient(timeout=2) as http:
        async with asyncio.timeout(30):
            while True:
                text = (await http.get(metrics)).text
                names = {family.name for family in text_string_to_metric_families(text)}
                if set(TEMPORAL_SDK_METRICS) <= names:
                    break
                await asyncio.sleep(0.2)

        watch = await stall_and_watch(http, livez, process, MAX_STALL)

    watch.assert_stalled_within(MAX_STALL)
    assert "the event loop has not run for" in worker_log.read_text()


async def _until_status(
    http: httpx.AsyncClient, url: str, status: int, *, within: float
) -> tuple[list[int], dict[str, Any]]:
    """Probe `url` every 0.1 s until it answers `status`; every status seen, and the body
    of that answer."""
    seen: list[int] = []
    async with asyncio.timeout(within):
        while True:
            try:
                answer = await http.get(url)
            except httpx.TransportError:
                await asyncio.sleep(0.1)
                continue
            seen.append(answer.status_code)
            if answer.status_code == status:
                return seen, answer.json()
            await asyncio.sleep(0.1)


async def test_readyz_follows_the_pollers_and_the_connection(
    tmp_path: Path, db_dsn: str, worker_log: Path
) -> None:
    port, liveness = free_port(), free_port()
    server = start_dev_server(tmp_path / "temporal", port=port)
    task_queue = f"ac-ready-{uuid.uuid4().hex[:10]}"
    env = temporal_cli_env(
        ACTIVITY_CORE_DATABASE_URL=db_dsn,
        ACTIVITY_CORE_ISSUE_SINK="none",
        TEMPORAL_ADDRESS=server.address,
        TEMPORAL_TASK_QUEUE=task_queue,
        ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS=f"127.0.0.1:{liveness}",
    )
    readyz, livez = f"http://127.0.0.1:{liveness}/readyz", f"http://127.0.0.1:{liveness}/livez"
    with worker_log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "temporal-worker"], env=env, stdout=out, stderr=out
        )
    try:
        async with httpx.AsyncClient(timeout=2) as http:
            seen, body = await _until_status(http, readyz, 200, within=60)
            # the endpoint listens before the worker connects, unready until it polls
            assert seen[0] == 503, seen
            assert body["status"] == "ready", body
            assert body["task_queue"] == task_queue, body
            assert body["identity"] == f"{process.pid}@{socket.gethostname()}", body
            assert set(body["seconds_since_poll"]) == {"workflow", "activity"}

            server.stop()
            _, body = await _until_status(http, readyz, 503, within=20)
            assert body["status"] == "temporal_unreachable", body
            assert process.poll() is None, worker_log.read_text()
            assert (await http.get(livez)).status_code == 200

            server = start_dev_server(tmp_path / "temporal", port=port)
            _, body = await _until_status(http, readyz, 200, within=60)
            assert body["status"] == "ready", body
    finally:
        process.kill()
        process.wait(timeout=10)
        server.stop()


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS", "localhost", "must be host:port"),
        ("ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS", "0.0.0.0:http", "the port"),
        ("ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_MAX_STALL_SECONDS", "1", "greater than"),
        ("ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS", "localhost:9100", "an IP address"),
        ("ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS", "0.0.0.0:0", "a fixed port"),
        ("ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS", "in-use", "cannot listen on"),
        ("ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS", "in-use", "cannot listen on"),
    ],
)
def test_a_bad_endpoint_setting_is_one_line_and_exit_2(
    variable: str, value: str, message: str
) -> None:
    with _listening() as taken:
        if value == "in-use":
            value = f"127.0.0.1:{taken.getsockname()[1]}"
        env = temporal_cli_env(
            # nothing listens there: the command must stop before it would connect
            ACTIVITY_CORE_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{free_port()}/none",
            ACTIVITY_CORE_ISSUE_SINK="none",
            TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
            **{variable: value},
        )
        done = subprocess.run(
            [sys.executable, "-c", ENTRY, "temporal-worker"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"activity-core: {variable}: ")
    assert message in done.stderr
