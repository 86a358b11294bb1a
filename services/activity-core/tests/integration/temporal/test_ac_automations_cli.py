"""`activity-core automations` against a real `activity-core serve` process and the real
Temporal dev server: list, show, pause, resume and fire, tables and JSON, exit codes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ac_temporal_kit import TemporalHarness, definition
from ac_testkit import OPERATOR_TOKEN, WORKER_TOKEN
from activity_core.cli_automations import main
from activity_core.temporal.dev_server import free_port

EXECUTABLE = Path(sys.executable).with_name("activity-core")


@dataclass
class Done:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
async def served(temporal: TemporalHarness, db_dsn: str) -> AsyncIterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTIVITY_CORE_", "OPS_RUN_"))}
    env.update(
        ACTIVITY_CORE_DATABASE_URL=db_dsn,
        ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ACTIVITY_CORE_WORKER_TOKEN=WORKER_TOKEN,
        ACTIVITY_CORE_WORKER_ID="w-cli",
        ACTIVITY_CORE_LOG_LEVEL="WARNING",
        TEMPORAL_ADDRESS=temporal.settings.temporal_address or "",
        TEMPORAL_TASK_QUEUE=temporal.task_queue,
    )
    port = free_port()
    proc = subprocess.Popen(
        [str(EXECUTABLE), "serve", "--port", str(port)],
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
                assert time.monotonic() < deadline, "serve did not become ready"
                try:
                    if (await probe.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


async def automations(url: str | None, *argv: str, token: str | None = OPERATOR_TOKEN) -> Done:
    environ = {"NO_PROXY": "*"}
    if url is not None:
        environ["ACTIVITY_CORE_API_URL"] = url
    if token is not None:
        environ["ACTIVITY_CORE_OPERATOR_TOKEN"] = token
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(main, list(argv), environ=environ, out=out, err=err)
    return Done(code, out.getvalue(), err.getvalue())


async def test_list_pause_resume_and_fire(temporal: TemporalHarness, served: str) -> None:
    scheduled = definition(temporal.slug, cron="0 6 * * *", timezone="UTC")
    manual = definition(f"{temporal.slug}-m", cron=None)
    await temporal.sync(scheduled, manual)

    listed = await automations(served, "list")
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split()[:4] == ["SLUG", "STATE", "SCHEDULE", "NEXT"]
    [row] = [line for line in lines if line.startswith(scheduled.id + " ")]
    assert "active" in row and "06:00:00" in row

    paused = await automations(served, "pause", scheduled.id, "--reason", "maintenance")
    assert paused.code == 0, paused.err
    assert "paused by operator" in paused.out
    assert "maintenance" in paused.out
    assert "next fires  none" in paused.out
    again = await automations(served, "pause", scheduled.id, "--json")
    assert again.code == 0
    assert again.json()["paused_by"] == "operator"
    assert again.json()["reason"] == "maintenance"
    assert again.json()["next_fire_times"] == []
    shown = await automations(served, "list", "--json")
    assert shown.code == 0
    [entry] = [a for a in shown.json()["automations"] if a["slug"] == scheduled.id]
    assert entry["paused"] is True

    refused_fire = await automations(served, "fire", scheduled.id)
    assert refused_fire.code == 1
    assert "state_conflict" in refused_fire.err

    resumed = await automations(served, "resume", scheduled.id, "--json")
    assert resumed.code == 0, resumed.err
    assert resumed.json()["paused"] is False
    assert resumed.json()["next_fire_times"]

    fired = await automations(served, "fire", manual.id, "--correlation-id", "c-1", "--json")
    assert fired.code == 0, fired.err
    assert fired.json()["trigger_key"].startswith("manual:")

    # refusals and their exit codes
    assert (await automations(served, "pause", manual.id)).code == 1
    assert (await automations(served, "resume", "no-such-thing")).code == 1
    assert (await automations(served, "pause", scheduled.id, token=WORKER_TOKEN)).code == 4
    assert (await automations(served, "pause", scheduled.id, token=None)).code == 2
    assert (await automations(served, "pause")).code == 2
    assert (await automations(served, "fire", manual.id, "--param", "novalue")).code == 2
    assert (await automations(f"http://127.0.0.1:{free_port()}", "list")).code == 3
