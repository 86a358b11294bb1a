"""A publication survives kill -9 of the Temporal worker process that runs it: the push
activity is stalled on the real git server, the `activity-core temporal-worker` process
is killed, another one takes the activity once its heartbeat lapses, and the run is
published exactly once (one push reached the server). The token is in no log and no row."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
from ac_publication_kit import (
    TARGET_REPO,
    receive_pack_posts,
    run_history,
    seed_published_candidate,
)
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from ac_testkit import SeededQueue, running_app
from ac_ui import ALICE, named_operators
from activity_core.publication.payloads import publication_workflow_id
from activity_core.publication.remote_git import changes_ref
from activity_core.temporal.dev_server import DevServer
from ops_testsupport.git_server import GitServer

ENTRY = "from activity_core.cli import console_main; console_main()"


def _env(**values: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACTIVITY_CORE_", "OPS_RUN_", "TEMPORAL_", "STATE_HUB"))
    }
    env.update(values)
    return env


@contextmanager
def worker_process(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "temporal-worker"],
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


async def _polling(process: subprocess.Popen[bytes], log: Path, count: int) -> None:
    async with asyncio.timeout(60):
        while log.read_text(errors="replace").count("temporal worker on task queue") < count:
            assert process.poll() is None, log.read_text(errors="replace")
            await asyncio.sleep(0.1)


async def _push_started(client: Client, workflow_id: str) -> None:
    async with asyncio.timeout(60):
        while True:
            described = await client.get_workflow_handle(workflow_id).describe()
            pending = described.raw_description.pending_activities
            if pending and pending[0].state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                return
            await asyncio.sleep(0.2)


async def test_kill_9_of_the_temporal_worker_mid_publish_publishes_exactly_once(
    temporal_client: Client,
    temporal_server: DevServer,
    db_dsn: str,
    db: asyncpg.Connection,
    git_server: GitServer,
    tmp_path: Path,
) -> None:
    token_file = git_server.write_token_file(tmp_path / "secrets")
    settings = {
        "ACTIVITY_CORE_DATABASE_URL": db_dsn,
        "ACTIVITY_CORE_ISSUE_SINK": "none",
        "ACTIVITY_CORE_LOG_LEVEL": "INFO",
        "TEMPORAL_ADDRESS": temporal_server.address,
        "TEMPORAL_TASK_QUEUE": f"ac-publish-kill-{uuid.uuid4().hex[:10]}",
        "ACTIVITY_CORE_REPOSITORY_URL": git_server.url_template,
        "ACTIVITY_CORE_REPOSITORY_TOKEN_FILE": str(token_file),
        "ACTIVITY_CORE_REPOSITORY_USERNAME": git_server.username,
    }
    history = run_history(git_server, tmp_path / "work")
    run_id = await seed_published_candidate(SeededQueue(db), history)
    log = tmp_path / "temporal-worker.log"
    env = _env(**settings)
    app_env: dict[str, Any] = {
        k: v
        for k, v in settings.items()
        if k not in ("ACTIVITY_CORE_DATABASE_URL", "ACTIVITY_CORE_LOG_LEVEL")
    }
    async with running_app(
        db_dsn, ACTIVITY_CORE_OPERATORS_FILE=named_operators(tmp_path / "ops.json"), **app_env
    ) as api:
        with worker_process(env, log) as first:
            await _polling(first, log, 1)
            git_server.stall_fetch = 120.0
            answer = await api.http.post(
                f"/ops-runs/{run_id}/publish", headers={"Authorization": f"Bearer {ALICE}"}
            )
            assert answer.status_code == 202, answer.text
            await _push_started(temporal_client, publication_workflow_id(str(run_id)))
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
        git_server.stall_fetch = None
        assert receive_pack_posts(git_server) == 0
        with worker_process(env, log) as second:
            await _polling(second, log, 2)
            async with asyncio.timeout(90):
                while True:
                    row = await db.fetchrow(
                        "SELECT * FROM ops_run_publications WHERE run_id = $1", run_id
                    )
                    assert row is not None
                    if row["state"] != "pending":
                        break
                    await asyncio.sleep(0.3)
        assert row["state"] == "published", row["error"]
        assert row["commit"] == history.tip
        assert git_server.refs(TARGET_REPO)[changes_ref(str(run_id), 1)] == history.tip
        assert receive_pack_posts(git_server) == 1
        shown = await api.http.get(f"/ops-runs/{run_id}", headers=api.operator_headers())
        assert shown.json()["publication"]["state"] == "published"
    # the token: in no log, no row of the publication or the audit trail
    assert git_server.token not in log.read_text(errors="replace")
    dumped = await db.fetchval(
        "SELECT (SELECT coalesce(string_agg(p::text, ''), '') FROM ops_run_publications p)"
        " || (SELECT coalesce(string_agg(a::text, ''), '') FROM ops_audit a)"
    )
    assert git_server.token not in dumped
