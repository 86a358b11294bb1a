"""The liveness endpoint of `rein-aharness run` (REIN_AHARNESS_LIVENESS_ADDRESS).

In a real process: `/livez` answers 200 while the worker's event loop runs, also while the
worker idles for longer than the limit, and 503 within the limit once something blocks the
loop, while the process is still there. To block the loop, the test starts the real CLI
under a tiny entry that installs a SIGUSR1 handler sleeping for a minute: Python runs
signal handlers on the main thread, which is the event loop's, so the handler is exactly a
synchronous call that does not return. The liveness thread is left alone (SIGSTOP would
freeze it too, and the probe would fail by timing out rather than by what it checks).

Bad values stop `run` at start with one line and exit 2, like every other setting.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ops_runtime.liveness import serve_liveness
from ops_testsupport.liveness import stall_and_watch, stalling_entry
from ops_testsupport.silent_connections import seconds_until_closed
from rein_aharness.cli import main
from rein_worker_kit import cli_environment

# `run` configures the `rein_aharness` logger for the process; undone per test
pytestmark = pytest.mark.usefixtures("restore_logging")

MAX_STALL = 2.0
# SIGUSR1 makes the main thread (the event loop's) sleep; the rest is the real CLI.
ENTRY = stalling_entry(
    "import sys", "from rein_aharness.cli import main", "sys.exit(main(sys.argv[1:]))"
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A complete `run` configuration against an activity-core that is not there: the
    worker keeps trying to claim and backs off, its event loop running all along."""
    return cli_environment(
        monkeypatch,
        tmp_path,
        "rein-aharness@test01",
        ACTIVITY_CORE_URL=f"http://127.0.0.1:{_closed_port()}",
        REIN_AHARNESS_STATE_DIR=str(tmp_path / "state"),
        REIN_AHARNESS_BACKOFF_SECONDS="0.5",
    )


async def _liveness_url(log: Path, process: subprocess.Popen[bytes]) -> str:
    async with asyncio.timeout(30):
        while True:
            assert process.poll() is None, log.read_text()
            found = re.search(r"liveness on (http://\S+/livez)", log.read_text())
            if found:
                return found.group(1)
            await asyncio.sleep(0.05)


async def test_livez_answers_while_the_loop_runs_and_fails_within_the_limit_once_it_is_blocked(
    environment: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        REIN_AHARNESS_LIVENESS_ADDRESS="127.0.0.1:0",
        REIN_AHARNESS_LIVENESS_MAX_STALL_SECONDS=str(MAX_STALL),
    )
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "run"], env=env, stdout=out, stderr=out
        )
    try:
        url = await _liveness_url(log, process)
        async with httpx.AsyncClient(timeout=2) as http:
            # Healthy: the worker fails to claim and backs off, again and again, for
            # longer than the limit; every answer is 200.
            watch = await stall_and_watch(http, url, process, MAX_STALL)
    finally:
        process.kill()
        process.wait(timeout=10)

    watch.assert_stalled_within(MAX_STALL)
    assert "the event loop has not run for" in log.read_text()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REIN_AHARNESS_LIVENESS_ADDRESS", "localhost"),
        ("REIN_AHARNESS_LIVENESS_ADDRESS", ":8081"),
        ("REIN_AHARNESS_LIVENESS_ADDRESS", "0.0.0.0:99999"),
        ("REIN_AHARNESS_LIVENESS_MAX_STALL_SECONDS", "1"),
        ("REIN_AHARNESS_LIVENESS_MAX_STALL_SECONDS", "nan"),
        ("REIN_AHARNESS_LIVENESS_MAX_STALL_SECONDS", "soon"),
    ],
)
def test_a_bad_liveness_setting_is_one_line_and_exit_2(
    environment: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["run", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and variable in err and "Traceback" not in err


def test_a_liveness_address_in_use_is_one_line_and_exit_2(
    environment: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        monkeypatch.setenv("REIN_AHARNESS_LIVENESS_ADDRESS", address)
        assert main(["run", "--once"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"rein-aharness: REIN_AHARNESS_LIVENESS_ADDRESS: cannot listen on {address}: "
        "Address already in use\n"
    )


def test_livez_is_the_only_path() -> None:
    """Anything but /livez is 404: the port answers the probe, nothing else."""

    async def scrape() -> tuple[int, int, dict[str, object]]:
        with serve_liveness("127.0.0.1", 0, max_stall_seconds=MAX_STALL) as (host, port):
            async with httpx.AsyncClient() as http:
                other = await http.get(f"http://{host}:{port}/metrics")
                live = await http.get(f"http://{host}:{port}/livez")
        return other.status_code, live.status_code, json.loads(live.text)

    other, live, body = asyncio.run(scrape())
    assert (other, live, body["status"]) == (404, 200, "ok")


@pytest.mark.parametrize("sent", [b"", b"GET /livez HTTP/1.1\r\nHost: x"], ids=["nothing", "half"])
def test_a_silent_connection_is_closed_and_the_probe_still_answers(sent: bytes) -> None:
    """The server takes a thread per connection: one that stops sending is closed after
    the read timeout instead of holding its thread for ever."""

    async def probe_while_one_is_silent() -> tuple[float, int]:
        with serve_liveness(
            "127.0.0.1", 0, max_stall_seconds=MAX_STALL, read_timeout_seconds=0.5
        ) as (host, port):
            silent = asyncio.create_task(
                asyncio.to_thread(seconds_until_closed, host, port, sent, 10.0)
            )
            async with httpx.AsyncClient() as http:
                live = await http.get(f"http://{host}:{port}/livez")
            return await silent, live.status_code

    closed_after, live = asyncio.run(probe_while_one_is_silent())
    assert live == 200
    assert 0.4 <= closed_after < 5
