"""Publication test support: a run's history on the real git server, its changes bundle
(ops_testsupport.changes_bundles, the reference builder), the grant it ran under, and a
publishing worker in the test's process."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import respx
from temporalio.client import Client

from ac_temporal_kit import ScriptedSink
from ac_testkit import SeededQueue, settings_env
from ac_ui import named_operators
from activity_core.db.pool import create_pool
from activity_core.publication.activities import PublicationActivities
from activity_core.settings import load_settings
from activity_core.temporal.worker import build_activities, build_worker
from ops_contracts import RepositoryGrantV1, parse_repository_grant
from ops_testsupport.changes_bundles import build_changes_bundle, bundle_digest, commit_files
from ops_testsupport.git_server import GitServer

TARGET_REPO = "research/briefs"
FORGEJO_API = "https://forgejo.example.org/api/v1"
PR_URL = "https://forgejo.example.org/research/briefs/pulls/1"

GRANT_RAW = {
    "version": "1",
    "allowed_paths": ["briefs/**"],
    "commit_count": {"min": 1, "max": 3},
    "publish": False,
}


def grant() -> RepositoryGrantV1:
    return parse_repository_grant(GRANT_RAW)


@dataclass(frozen=True)
class History:
    repo: Path  # a clone of the server's repository with the run's commits
    baseline: str
    commits: tuple[str, ...]

    @property
    def tip(self) -> str:
        return self.commits[-1]

    def bundle(self, run_id: str, attempt: int, **tamper: object) -> bytes:
        return build_changes_bundle(
            self.repo,
            self.baseline,
            self.tip,
            run_id,
            attempt,
            **tamper,  # type: ignore[arg-type]
        )


def run_history(
    server: GitServer, work: Path, *, files: dict[str, str | bytes | None] | None = None
) -> History:
    """The server's repository TARGET_REPO (created when missing), cloned to `work`, and
    two commits on top of its head as a run would make them (not pushed)."""
    bare = server.root / f"{TARGET_REPO}.git"
    if not bare.exists():
        server.create_repository(TARGET_REPO)
    baseline = server.head(TARGET_REPO)
    subprocess.run(
        ["git", "clone", "--quiet", str(bare), str(work)],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"},
    )
    first = commit_files(work, {"briefs/one.md": "one\n"}, "brief one")
    second = commit_files(work, files or {"briefs/two.md": "two\n"}, "brief two")
    return History(repo=work, baseline=baseline, commits=(first, second))


def receive_pack_posts(server: GitServer) -> int:
    """How many pushes reached the server (each push is one receive-pack POST)."""
    return sum(
        1
        for request in server.requests_to(TARGET_REPO)
        if request.method == "POST" and request.path.endswith("/git-receive-pack")
    )


async def seed_published_candidate(
    seeded: SeededQueue,
    history: History,
    *,
    attempt: int = 1,
    bundle: bytes | None = None,
    title: str = "Research brief for 2026-12-07",
) -> uuid.UUID:
    """A succeeded granted run whose evidence is `history`, and its stored changes row,
    written directly (as the upload would after its checks; a test passes another
    `bundle` to write what the upload would have refused)."""
    result = {
        "ok": True,
        "head_after": history.tip,
        "target_repo": TARGET_REPO,
        "repository_transaction": {
            "transaction_id": "tx-1",
            "baseline_digest": history.baseline,
            "acceptance": "accepted",
            "accepted_commits": list(history.commits),
            "accepted_paths": ["briefs/one.md", "briefs/two.md"],
        },
    }
    run_id = await seeded.run(
        repository_grant=GRANT_RAW,
        state="succeeded",
        attempt=attempt,
        result=result,
        title=title,
    )
    data = bundle if bundle is not None else history.bundle(str(run_id), attempt)
    await seeded.conn.execute(
        """INSERT INTO ops_run_changes
               (run_id, attempt, digest, size, baseline, head_after, commits, paths, bundle)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)""",
        run_id,
        attempt,
        bundle_digest(data),
        len(data),
        history.baseline,
        history.tip,
        list(history.commits),
        ["briefs/one.md", "briefs/two.md"],
        data,
    )
    return run_id


def forgejo_router() -> respx.MockRouter:
    router = respx.MockRouter(assert_all_called=False, assert_all_mocked=True)
    router.get(url__regex=rf"^{FORGEJO_API}/repos/research/briefs/pulls/main/.+$").mock(
        return_value=httpx.Response(404, json={"message": "not found"})
    )
    router.post(f"{FORGEJO_API}/repos/research/briefs/pulls", name="open").mock(
        return_value=httpx.Response(201, json={"html_url": PR_URL, "number": 1})
    )
    return router


@asynccontextmanager
async def publishing_worker(
    temporal_client: Client,
    temporal_address: str,
    db_dsn: str,
    git_server: GitServer,
    tmp_path: Path,
    task_queue: str,
    **more: Any,
) -> AsyncIterator[tuple[dict[str, Any], respx.MockRouter]]:
    """A worker in this process with PublishChangesWorkflow on a task queue of its own
    (`task_queue`, made unique), pushing to `git_server` and opening pull requests on a
    respx Forgejo (FORGEJO_API), the named operators' file and the tokens in `tmp_path`.
    Yields the settings' environment (`more` added last), for the app, and the Forgejo."""
    forgejo_token = tmp_path / "forgejo-token"
    forgejo_token.write_text("forgejo-secret-token-0123456789\n")
    env = settings_env(
        TEMPORAL_ADDRESS=temporal_address,
        TEMPORAL_TASK_QUEUE=f"{task_queue}-{uuid.uuid4().hex[:12]}",
        ACTIVITY_CORE_ISSUE_SINK="none",
        ACTIVITY_CORE_OPERATORS_FILE=named_operators(tmp_path / "operators.json"),
        ACTIVITY_CORE_REPOSITORY_URL=git_server.url_template,
        ACTIVITY_CORE_REPOSITORY_TOKEN_FILE=str(git_server.write_token_file(tmp_path / "s")),
        ACTIVITY_CORE_REPOSITORY_USERNAME=git_server.username,
        ACTIVITY_CORE_FORGEJO_API_URL=FORGEJO_API,
        ACTIVITY_CORE_FORGEJO_TOKEN_FILE=str(forgejo_token),
        **more,
    )
    settings = load_settings(**env)
    pool = await create_pool(db_dsn, min_size=1, max_size=5)
    router = forgejo_router()
    worker = build_worker(
        temporal_client,
        task_queue=settings.temporal_task_queue,
        activities=build_activities(settings, pool, ScriptedSink()),
        publication=PublicationActivities(
            pool, settings, forgejo_transport=httpx.MockTransport(router.handler)
        ),
    )
    try:
        async with worker:
            yield env, router
    finally:
        await pool.close()
