"""A publication survives kill -9 of the Temporal worker process that runs it, at the two
points where a death matters:

- before the push: the push activity is stalled on the real git server's fetch;
- after the push, before the result is recorded: the git server's own post-receive hook
  (the ref is already updated) writes a marker and holds the push's answer, the test
  kills the worker once the marker is there, so the `published` row was never written.

Either way another `activity-core temporal-worker` process takes the activity once its
heartbeat lapses, and the run is published exactly once (one push reached the server, at
most one pull request was opened on the Forgejo stand-in). No token is in a log or a row."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from ac_publication_kit import (
    TARGET_REPO,
    receive_pack_posts,
    run_history,
    seed_published_candidate,
)
from ac_serve import temporal_cli_env
from ac_testkit import AppClient, SeededQueue, running_app
from ac_ui import ALICE, named_operators
from activity_core.publication.payloads import publication_workflow_id
from activity_core.publication.remote_git import changes_ref
from activity_core.temporal.dev_server import DevServer
from ops_runtime.threaded_servers import served_in_a_thread
from ops_testsupport.git_server import GitServer

ENTRY = "from activity_core.cli import console_main; console_main()"


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


def _worker_settings(
    db_dsn: str,
    temporal_server: DevServer,
    git_server: GitServer,
    token_file: Path,
    task_queue: str,
    **more: str,
) -> dict[str, str]:
    """The settings a publishing worker process and the app share; `task_queue` made unique."""
    return {
        "ACTIVITY_CORE_DATABASE_URL": db_dsn,
        "ACTIVITY_CORE_ISSUE_SINK": "none",
        "ACTIVITY_CORE_LOG_LEVEL": "INFO",
        "TEMPORAL_ADDRESS": temporal_server.address,
        "TEMPORAL_TASK_QUEUE": f"{task_queue}-{uuid.uuid4().hex[:10]}",
        "ACTIVITY_CORE_REPOSITORY_URL": git_server.url_template,
        "ACTIVITY_CORE_REPOSITORY_TOKEN_FILE": str(token_file),
        "ACTIVITY_CORE_REPOSITORY_USERNAME": git_server.username,
        **more,
    }


@asynccontextmanager
async def _publishing_app(
    db_dsn: str, settings: dict[str, str], tmp_path: Path
) -> AsyncIterator[AppClient]:
    """The app on the workers' settings (but the database and the log level, its own), with
    the named operators."""
    app_env: dict[str, Any] = {
        k: v
        for k, v in settings.items()
        if k not in ("ACTIVITY_CORE_DATABASE_URL", "ACTIVITY_CORE_LOG_LEVEL")
    }
    async with running_app(
        db_dsn, ACTIVITY_CORE_OPERATORS_FILE=named_operators(tmp_path / "ops.json"), **app_env
    ) as api:
        yield api


@asynccontextmanager
async def _polling_worker(
    env: dict[str, str], log: Path, count: int
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """A worker process, once it is the `count`th to poll the task queue in `log`."""
    with worker_process(env, log) as process:
        await _polling(process, log, count)
        yield process


async def _settled(
    db: asyncpg.Connection, run_id: uuid.UUID, done: Callable[[asyncpg.Record], bool]
) -> asyncpg.Record:
    """The run's publication row, once `done` holds for it (within 90 s)."""
    async with asyncio.timeout(90):
        while True:
            row = await db.fetchrow("SELECT * FROM ops_run_publications WHERE run_id = $1", run_id)
            assert row is not None
            if done(row):
                return row
            await asyncio.sleep(0.3)


async def _dumped(db: asyncpg.Connection) -> str:
    """Every publication row and audit entry, as text: where no token may be."""
    dumped: str = await db.fetchval(
        "SELECT (SELECT coalesce(string_agg(p::text, ''), '') FROM ops_run_publications p)"
        " || (SELECT coalesce(string_agg(a::text, ''), '') FROM ops_audit a)"
    )
    return dumped


async def test_kill_9_of_the_temporal_worker_mid_publish_publishes_exactly_once(
    temporal_client: Client,
    temporal_server: DevServer,
    db_dsn: str,
    db: asyncpg.Connection,
    git_server: GitServer,
    tmp_path: Path,
) -> None:
    token_file = git_server.write_token_file(tmp_path / "secrets")
    settings = _worker_settings(db_dsn, temporal_server, git_server, token_file, "ac-publish-kill")
    history = run_history(git_server, tmp_path / "work")
    run_id = await seed_published_candidate(SeededQueue(db), history)
    log = tmp_path / "temporal-worker.log"
    env = temporal_cli_env(**settings)
    async with _publishing_app(db_dsn, settings, tmp_path) as api:
        async with _polling_worker(env, log, 1) as first:
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
        async with _polling_worker(env, log, 2):
            row = await _settled(db, run_id, lambda row: row["state"] != "pending")
        assert row["state"] == "published", row["error"]
        assert row["commit"] == history.tip
        assert git_server.refs(TARGET_REPO)[changes_ref(str(run_id), 1)] == history.tip
        assert receive_pack_posts(git_server) == 1
        shown = await api.http.get(f"/ops-runs/{run_id}", headers=api.operator_headers())
        assert shown.json()["publication"]["state"] == "published"
    # the token: in no log, no row of the publication or the audit trail
    assert git_server.token not in log.read_text(errors="replace")
    assert git_server.token not in await _dumped(db)


class ForgejoStandIn:
    """Forgejo's pull-request API as the publication calls it (publication/forgejo.py), in
    a thread of the test: the lookup answers 404 until a pull request was opened; every
    POST is counted, so a second opening shows."""

    def __init__(self) -> None:
        self.opened = 0
        self.tokens: list[str] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                """Quiet: `opened` is the log."""

            def _answer(self, status: int, body: dict[str, object]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                stand_in.tokens.append(self.headers.get("Authorization", ""))
                if stand_in.opened:
                    self._answer(200, {"html_url": stand_in.pr_url, "number": 1})
                else:
                    self._answer(404, {"message": "not found"})

            def do_POST(self) -> None:
                stand_in.tokens.append(self.headers.get("Authorization", ""))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                stand_in.opened += 1
                self._answer(201, {"html_url": stand_in.pr_url, "number": 1})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.api_url = f"{base}/api/v1"
        self.pr_url = f"{base}/research/briefs/pulls/1"
        self._serving = ExitStack()

    def __enter__(self) -> ForgejoStandIn:
        self._serving.enter_context(served_in_a_thread(self._server, "forgejo-stand-in"))
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.close()


def _hold_after_receive(git_server: GitServer, marks: Path) -> tuple[Path, Path]:
    """A post-receive hook in the server's repository: git runs it after the refs were
    updated and before receive-pack (so the push's HTTP answer) ends. It writes `pushed`
    and waits for `release` (at most 120 s), so the pushing client hangs right after its
    push has landed. (The server's own hooks: the publication's scratch repository never
    runs one.)"""
    marks.mkdir(parents=True, exist_ok=True)
    pushed, release = marks / "pushed", marks / "release"
    hook = git_server.root / f"{TARGET_REPO}.git" / "hooks" / "post-receive"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(
        "#!/bin/sh\n"
        "cat >/dev/null\n"
        f": > '{pushed}'\n"
        "i=0\n"
        f"while [ ! -e '{release}' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n"
    )
    hook.chmod(0o755)
    return pushed, release


async def test_kill_9_of_the_temporal_worker_after_the_push_records_it_without_a_second(
    temporal_server: DevServer,
    db_dsn: str,
    db: asyncpg.Connection,
    git_server: GitServer,
    tmp_path: Path,
) -> None:
    token_file = git_server.write_token_file(tmp_path / "secrets")
    forgejo_token = tmp_path / "secrets" / "forgejo-token"
    forgejo_token.write_text("forgejo-secret-token-after-push-0123\n")
    history = run_history(git_server, tmp_path / "work")
    pushed, release = _hold_after_receive(git_server, tmp_path / "marks")
    run_id = await seed_published_candidate(SeededQueue(db), history)
    ref = changes_ref(str(run_id), 1)
    log = tmp_path / "temporal-worker.log"
    with ForgejoStandIn() as forgejo:
        settings = _worker_settings(
            db_dsn,
            temporal_server,
            git_server,
            token_file,
            "ac-publish-kill-after",
            ACTIVITY_CORE_FORGEJO_API_URL=forgejo.api_url,
            ACTIVITY_CORE_FORGEJO_TOKEN_FILE=str(forgejo_token),
        )
        env = temporal_cli_env(**settings)
        async with _publishing_app(db_dsn, settings, tmp_path) as api:
            try:
                async with _polling_worker(env, log, 1) as first:
                    answer = await api.http.post(
                        f"/ops-runs/{run_id}/publish", headers={"Authorization": f"Bearer {ALICE}"}
                    )
                    assert answer.status_code == 202, answer.text
                    async with asyncio.timeout(60):
                        while not pushed.exists():
                            assert first.poll() is None, log.read_text(errors="replace")
                            await asyncio.sleep(0.05)
                    os.killpg(first.pid, signal.SIGKILL)
                    first.wait(timeout=10)
            finally:
                release.touch()
            # the kill point: the push landed, its result was not recorded
            assert git_server.refs(TARGET_REPO)[ref] == history.tip
            assert receive_pack_posts(git_server) == 1
            row = await db.fetchrow("SELECT * FROM ops_run_publications WHERE run_id = $1", run_id)
            assert row is not None and row["state"] == "pending"
            assert forgejo.opened == 0
            async with _polling_worker(env, log, 2):
                row = await _settled(
                    db,
                    run_id,
                    lambda row: row["state"] != "pending" and row["pull_request_url"] is not None,
                )
            assert row["state"] == "published", row["error"]
            assert row["commit"] == history.tip
            assert row["pull_request_url"] == forgejo.pr_url
            assert git_server.refs(TARGET_REPO)[ref] == history.tip
            assert receive_pack_posts(git_server) == 1  # found at head_after: no second push
            assert forgejo.opened == 1
            shown = await api.http.get(f"/ops-runs/{run_id}", headers=api.operator_headers())
            assert shown.json()["publication"]["state"] == "published"
    assert set(forgejo.tokens) == {"token forgejo-secret-token-after-push-0123"}
    text = log.read_text(errors="replace")
    assert "already there" in text  # the second worker's log line: no push of its own
    dumped = await _dumped(db)
    for secret in (git_server.token, "forgejo-secret-token-after-push-0123"):
        assert secret not in text
        assert secret not in dumped
