"""TEMPORAL_NAMESPACE, on a real dev server that has a namespace besides `default`:
`activity-core sync-definitions` creates the schedules there, `activity-core
temporal-worker` runs the fires there, and the API's manual fire starts them there.
Nothing reaches `default`. Both commands run as real processes."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client, ScheduleOverlapPolicy
from temporalio.service import RPCError, RPCStatusCode

from ac_serve import temporal_cli_env
from ac_temporal_kit import PROFILE
from activity_core.db.pool import create_pool
from activity_core.temporal.client import connect
from activity_core.temporal.dev_server import DevServer, free_port, start_dev_server

NAMESPACE = "ac-elsewhere"
ENTRY = "from activity_core.cli import console_main; console_main()"


@pytest.fixture(scope="module")
def namespaced_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = start_dev_server(
        tmp_path_factory.mktemp("temporal-ns"), port=free_port(), namespace=NAMESPACE
    )
    try:
        yield server
    finally:
        server.stop()


def write_definition(directory: Path, slug: str) -> Path:
    doc = {
        "id": slug,
        "title": f"Namespace test {slug}",
        "schedule": {"cron": "0 3 1 1 *", "timezone": "UTC"},  # never due in a test
        "rules": [
            {
                "id": "daily-brief",
                "action": {
                    "task_template": "Brief for {scheduled_for:%Y-%m-%d}",
                    "target_repo": "research/briefs",
                    "labels": ["automated"],
                    "harness_profile_ref": PROFILE,
                },
            }
        ],
    }
    path = directory / f"{slug}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


async def schedule_exists(client: Client, slug: str) -> bool:
    try:
        await client.get_schedule_handle(f"activity:{slug}").describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def workflows(client: Client, task_queue: str, *, at_least: int = 0) -> list[str]:
    """The workflow ids of the task queue (waiting up to 20 s for visibility to list
    `at_least` of them)."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        found = [wf.id async for wf in client.list_workflows(f'TaskQueue = "{task_queue}"')]
        if len(found) >= at_least or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.2)


async def test_sync_worker_and_manual_fire_use_the_configured_namespace(
    namespaced_server: DevServer, db_dsn: str, tmp_path: Path, app_factory: Any
) -> None:
    slug = f"ns-{uuid.uuid4().hex[:8]}"
    task_queue = f"ac-ns-{uuid.uuid4().hex[:10]}"
    env = temporal_cli_env(
        ACTIVITY_CORE_DATABASE_URL=db_dsn,
        ACTIVITY_CORE_STATE_DIR=str(tmp_path / "state"),
        ACTIVITY_CORE_ISSUE_SINK="none",
        TEMPORAL_ADDRESS=namespaced_server.address,
        TEMPORAL_NAMESPACE=NAMESPACE,
        TEMPORAL_TASK_QUEUE=task_queue,
    )
    definitions = tmp_path / "definitions"
    definitions.mkdir()
    write_definition(definitions, slug)

    synced = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", ENTRY, "sync-definitions", str(definitions)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert synced.returncode == 0, synced.stderr
    assert "definitions synced" in synced.stdout

    elsewhere = await connect(namespaced_server.address, NAMESPACE)
    default = await connect(namespaced_server.address, "default")
    assert await schedule_exists(elsewhere, slug)
    assert not await schedule_exists(default, slug)

    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        ENTRY,
        "temporal-worker",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    pool = await create_pool(db_dsn, min_size=1, max_size=2)
    try:
        assert worker.stdout is not None
        ready = await asyncio.wait_for(worker.stdout.readline(), timeout=60)
        assert f"(namespace '{NAMESPACE}'," in ready.decode()

        # the schedule's own action, in its namespace
        await elsewhere.get_schedule_handle(f"activity:{slug}").trigger(
            overlap=ScheduleOverlapPolicy.ALLOW_ALL
        )
        # and a manual fire through the API configured for the same namespace
        api = await app_factory(
            TEMPORAL_ADDRESS=namespaced_server.address,
            TEMPORAL_NAMESPACE=NAMESPACE,
            TEMPORAL_TASK_QUEUE=task_queue,
        )
        fired = await api.http.post(
            f"/ops/automations/{slug}/fire", json={}, headers=api.operator_headers()
        )
        assert fired.status_code == 202, fired.text

        deadline = asyncio.get_running_loop().time() + 60
        while True:
            statuses = [
                r["status"]
                for r in await pool.fetch(
                    """SELECT r.status FROM activity_runs r JOIN activity_definitions d
                         ON d.id = r.activity_definition_id WHERE d.slug = $1""",
                    slug,
                )
            ]
            if statuses == ["emitted", "emitted"]:
                break
            assert asyncio.get_running_loop().time() < deadline, statuses
            await asyncio.sleep(0.2)
        assert (
            await pool.fetchval(
                """SELECT count(*) FROM ops_runs o JOIN activity_definitions d
                 ON d.id = o.activity_definition_id WHERE d.slug = $1""",
                slug,
            )
            == 2
        )
        ran_there = await workflows(elsewhere, task_queue, at_least=2)
        assert len(ran_there) == 2
        assert fired.json()["workflow_id"] in ran_there
        assert await workflows(default, task_queue) == []
    finally:
        await pool.close()
        if worker.returncode is None:
            worker.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(worker.communicate(), timeout=30)
    assert worker.returncode == 0, stderr.decode()
