"""POST /ops-runs/{id}/publish end to end: the app, the real Temporal dev server, a worker
with PublishChangesWorkflow, the real git server (smart HTTP, Basic auth) and a respx
Forgejo. Published means the server's ref is the run's head_after (parent chain to the
baseline) and the pull request is open; a repeat pushes nothing; a taken ref or a stored
bundle that is not the run's fails with its reason and overwrites nothing; a failed
publication can be asked for again; a viewer is refused and audited."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import respx
from temporalio.client import Client

from ac_publication_kit import (
    PR_URL,
    TARGET_REPO,
    History,
    publishing_worker,
    receive_pack_posts,
    run_history,
    seed_published_candidate,
)
from ac_serve import Done, operator_cli, serve_env, serve_process
from ac_testkit import AppClient, SeededQueue, running_app
from ac_ui import ALICE, BOB, cookie_of, csrf_in, login, post_form, session
from activity_core.operator.cli import main
from activity_core.publication.payloads import publication_workflow_id
from activity_core.publication.remote_git import changes_ref
from activity_core.temporal.dev_server import DevServer
from ops_testsupport.changes_bundles import git
from ops_testsupport.git_server import GitServer


@dataclass
class Publishing:
    api: AppClient
    db: asyncpg.Connection
    seeded: SeededQueue
    server: GitServer
    forgejo: respx.MockRouter
    work: Path
    env: dict[str, Any]

    def history(self, name: str = "work", **kwargs: Any) -> History:
        return run_history(self.server, self.work / f"{name}-{uuid.uuid4().hex[:6]}", **kwargs)

    async def publish(self, run_id: uuid.UUID, token: str = ALICE) -> httpx.Response:
        return await self.api.http.post(
            f"/ops-runs/{run_id}/publish", headers={"Authorization": f"Bearer {token}"}
        )

    async def settled(self, run_id: uuid.UUID, timeout: float = 30.0) -> asyncpg.Record:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            row = await self.db.fetchrow(
                "SELECT * FROM ops_run_publications WHERE run_id = $1", run_id
            )
            if row is not None and row["state"] != "pending":
                if row["state"] == "failed" or not self.env.get("pull_requests"):
                    return row
                if row["pull_request_url"] is not None or row["error"] is not None:
                    return row
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"publication of {run_id} still {row and row['state']}")
            await asyncio.sleep(0.2)

    async def audit(self, run_id: uuid.UUID) -> list[asyncpg.Record]:
        return await self.db.fetch(
            "SELECT * FROM ops_audit WHERE target = $1 AND action = 'publish' ORDER BY id",
            f"ops_run:{run_id}",
        )


async def runs(url: str, *argv: str, token: str) -> Done:
    """`activity-core runs ...` against `url` with `token` (test_ac_runs_cli.py's way)."""
    return await operator_cli(main, url, *argv, token=token)


@pytest.fixture
async def publishing(
    temporal_client: Client,
    temporal_server: DevServer,
    db_dsn: str,
    db: asyncpg.Connection,
    git_server: GitServer,
    tmp_path: Path,
) -> AsyncIterator[Publishing]:
    async with (
        publishing_worker(
            temporal_client,
            temporal_server.address,
            db_dsn,
            git_server,
            tmp_path,
            "ac-publish",
            ACTIVITY_CORE_PUBLIC_URL="https://ops.example.org",
        ) as (env, router),
        running_app(db_dsn, **env) as api,
    ):
        yield Publishing(
            api=api,
            db=db,
            seeded=SeededQueue(db),
            server=git_server,
            forgejo=router,
            work=tmp_path,
            env={**env, "pull_requests": True},
        )


async def test_an_operator_publishes_and_a_repeat_pushes_nothing(publishing: Publishing) -> None:
    history = publishing.history()
    run_id = await seed_published_candidate(publishing.seeded, history)
    first = await publishing.publish(run_id)
    assert first.status_code == 202, first.text
    assert first.json()["publication"]["state"] == "pending"
    assert first.json()["publication"]["requested_by"] == "alice"
    row = await publishing.settled(run_id)
    ref = changes_ref(str(run_id), 1)
    assert row["state"] == "published" and row["commit"] == history.tip and row["ref"] == ref
    assert row["pull_request_url"] == PR_URL
    # the server's branch is exactly head_after, its first-parent chain reaches the baseline
    assert publishing.server.refs(TARGET_REPO)[ref] == history.tip
    bare = publishing.server.root / f"{TARGET_REPO}.git"
    chain = git(bare, "rev-list", "--first-parent", ref).decode().split()
    assert chain == [*reversed(history.commits), history.baseline]
    opened = publishing.forgejo.routes["open"].calls
    assert len(opened) == 1
    sent = opened.last.request
    assert b'"head":"rein/' in sent.content.replace(b" ", b"")
    assert f"https://ops.example.org/ops/ui/runs/{run_id}".encode() in sent.content
    # the run shows it
    shown = await publishing.api.http.get(
        f"/ops-runs/{run_id}", headers=publishing.api.operator_headers()
    )
    publication = shown.json()["publication"]
    assert publication["state"] == "published" and publication["pull_request_url"] == PR_URL
    assert publication["commit"] == history.tip and publication["ref"] == ref
    # and the change view too
    view = await publishing.api.http.get(
        f"/ops-runs/{run_id}/changes", headers=publishing.api.operator_headers()
    )
    assert view.status_code == 200, view.text
    assert view.json()["publication"]["state"] == "published"
    assert view.json()["publication"]["pull_request_url"] == PR_URL
    # a second publish: published, no new workflow, no second push, no second PR
    again = await publishing.publish(run_id)
    assert again.status_code == 200 and again.json()["publication"]["state"] == "published"
    await asyncio.sleep(1.0)
    assert receive_pack_posts(publishing.server) == 1
    assert len(publishing.forgejo.routes["open"].calls) == 1
    outcomes = [(e["actor"], e["outcome"]) for e in await publishing.audit(run_id)]
    assert outcomes == [("alice", "applied"), ("alice", "repeated")]


async def test_a_taken_ref_fails_with_its_reason_and_is_not_overwritten(
    publishing: Publishing,
) -> None:
    history = publishing.history()
    run_id = await seed_published_candidate(publishing.seeded, history)
    ref = changes_ref(str(run_id), 1)
    bare = publishing.server.root / f"{TARGET_REPO}.git"
    git(bare, "update-ref", ref, history.baseline)
    assert (await publishing.publish(run_id)).status_code == 202
    row = await publishing.settled(run_id)
    assert row["state"] == "failed"
    assert "already has" in row["error"] and "nothing was overwritten" in row["error"]
    assert publishing.server.refs(TARGET_REPO)[ref] == history.baseline
    assert receive_pack_posts(publishing.server) == 0
    shown = await publishing.api.http.get(
        f"/ops-runs/{run_id}", headers=publishing.api.operator_headers()
    )
    assert shown.json()["publication"]["state"] == "failed"
    assert "already has" in shown.json()["publication"]["error"]


@pytest.mark.parametrize("tamper", ["tip", "path", "attempt"])
async def test_a_tampered_stored_bundle_is_refused_at_publish_and_a_fixed_one_publishes(
    publishing: Publishing, tamper: str
) -> None:
    history = publishing.history()
    evil = publishing.history("evil", files={"outside/evil.md": "x\n"})
    # the row is written as the upload would have stored it, then its bundle replaced
    # directly, as someone with the database could
    run_id = await seed_published_candidate(publishing.seeded, history)
    if tamper == "tip":
        earlier = History(history.repo, history.baseline, history.commits[:1])
        data = earlier.bundle(str(run_id), 1)
        expected = "tip"
    elif tamper == "path":
        data = evil.bundle(str(run_id), 1)
        expected = "not the run's head_after|outside the grant"
    else:
        data = history.bundle(str(run_id), 2)
        expected = "not this attempt's"
    await publishing.db.execute(
        "UPDATE ops_run_changes SET bundle = $2, size = $3 WHERE run_id = $1",
        run_id,
        data,
        len(data),
    )
    assert (await publishing.publish(run_id)).status_code == 202
    row = await publishing.settled(run_id)
    assert row["state"] == "failed"
    assert re.search(expected, row["error"]), row["error"]
    assert changes_ref(str(run_id), 1) not in publishing.server.refs(TARGET_REPO)
    assert receive_pack_posts(publishing.server) == 0
    # the stored bundle put right: a failed publication is asked for again and publishes
    good = history.bundle(str(run_id), 1)
    await publishing.db.execute(
        "UPDATE ops_run_changes SET bundle = $2, size = $3 WHERE run_id = $1",
        run_id,
        good,
        len(good),
    )
    again = await publishing.publish(run_id)
    assert again.status_code == 202, again.text
    row = await publishing.settled(run_id)
    assert row["state"] == "published" and row["error"] is None
    assert publishing.server.refs(TARGET_REPO)[changes_ref(str(run_id), 1)] == history.tip


async def test_a_viewer_is_refused_and_audited_and_nothing_starts(publishing: Publishing) -> None:
    history = publishing.history()
    run_id = await seed_published_candidate(publishing.seeded, history)
    refused = await publishing.publish(run_id, token=BOB)
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    entries = await publishing.audit(run_id)
    assert [(e["actor"], e["outcome"], e["code"]) for e in entries] == [
        ("bob", "refused", "forbidden")
    ]
    assert await publishing.db.fetchval("SELECT count(*) FROM ops_run_publications") == 0


async def test_only_a_succeeded_run_with_stored_changes_is_published(
    publishing: Publishing,
) -> None:
    open_run = await publishing.seeded.run(repository_grant=None)
    answer = await publishing.publish(open_run)
    assert answer.status_code == 409 and answer.json()["code"] == "state_conflict"
    bare_run = await publishing.seeded.run(state="succeeded", attempt=1)
    answer = await publishing.publish(bare_run)
    assert answer.status_code == 409 and "no stored changes" in answer.json()["detail"]
    missing = await publishing.publish(uuid.uuid4())
    assert missing.status_code == 404
    refusals = await publishing.db.fetch(
        "SELECT code FROM ops_audit WHERE action = 'publish' AND outcome = 'refused'"
    )
    assert sorted(r["code"] for r in refusals) == ["not_found", "state_conflict", "state_conflict"]
    assert await publishing.db.fetchval("SELECT count(*) FROM ops_run_publications") == 0


async def test_the_cli_publishes_and_runs_show_shows_the_publication(
    publishing: Publishing, db_dsn: str
) -> None:
    history = publishing.history()
    run_id = await seed_published_candidate(publishing.seeded, history)
    env = serve_env(
        db_dsn, **{k: str(v) for k, v in publishing.env.items() if k != "pull_requests"}
    )
    async with serve_process(env) as (_, url):
        before = await runs(url, "show", str(run_id), token=ALICE)
        assert before.code == 0, before.err
        assert "publication" in before.out and "not asked for" in before.out
        done = await runs(url, "publish", str(run_id), token=ALICE)
        assert done.code == 0, done.err
        assert "publication started: pending" in done.out
        await publishing.settled(run_id)
        shown = await runs(url, "show", str(run_id), token=ALICE)
        (line,) = [x for x in shown.out.splitlines() if x.startswith("publication")]
        assert "published" in line and f"ref={changes_ref(str(run_id), 1)}" in line
        assert f"pull_request_url={PR_URL}" in line
        again = await runs(url, "publish", str(run_id), "--json", token=ALICE)
        assert again.code == 0 and again.json()["publication"]["state"] == "published"
        viewer = await runs(url, "publish", str(run_id), token=BOB)
        assert viewer.code != 0 and "forbidden" in viewer.err


async def test_the_run_pages_publish_form_is_an_operators_with_csrf_from_the_uis_origin(
    publishing: Publishing,
) -> None:
    history = publishing.history()
    run_id = await seed_published_candidate(publishing.seeded, history)
    http = publishing.api.http
    path = f"/ops/ui/runs/{run_id}"
    # the UI's origin is ACTIVITY_CORE_PUBLIC_URL's
    ui = {"origin": "https://ops.example.org"}
    alice = cookie_of(await login(http, ALICE, "alice", headers=ui))
    before = await http.get(path, headers=session(alice))
    assert "Not published" in before.text and 'data-action="publish"' in before.text
    csrf = csrf_in(before.text)
    # cross-origin, token-less, and a viewer's own token: each changes nothing
    cross = await post_form(
        http, f"{path}/publish", {"csrf_token": csrf}, alice, {"origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    tokenless = await post_form(http, f"{path}/publish", {}, alice, ui)
    assert tokenless.status_code == 403 and "token" in tokenless.text.lower()
    bob = cookie_of(await login(http, BOB, "bob", headers=ui))
    viewer_page = await http.get(path, headers=session(bob))
    assert 'data-action="publish"' not in viewer_page.text
    forged = await post_form(
        http, f"{path}/publish", {"csrf_token": csrf_in(viewer_page.text)}, bob, ui
    )
    assert forged.status_code == 403 and "Viewers cannot act" in forged.text
    assert await publishing.db.fetchval("SELECT count(*) FROM ops_run_publications") == 0
    assert receive_pack_posts(publishing.server) == 0
    refused = [(e["actor"], e["outcome"]) for e in await publishing.audit(run_id)]
    assert ("bob", "refused") in refused
    # the operator's form, from the UI's origin with the session's token: published
    done = await post_form(http, f"{path}/publish", {"csrf_token": csrf}, alice, ui)
    assert done.status_code == 303
    assert done.headers["location"] == f"{path}?done=publishing#publication"
    await publishing.settled(run_id)
    after = await http.get(path, headers=session(alice))
    assert 'data-field="publication_state">published' in after.text
    assert changes_ref(str(run_id), 1) in after.text and PR_URL in after.text
    assert 'data-action="publish"' not in after.text


async def test_a_refused_pull_request_leaves_the_branch_published_with_the_reason(
    publishing: Publishing,
) -> None:
    publishing.forgejo.routes["open"].mock(
        return_value=httpx.Response(403, json={"message": "token lacks write:repository"})
    )
    history = publishing.history()
    run_id = await seed_published_candidate(publishing.seeded, history)
    assert (await publishing.publish(run_id)).status_code == 202
    row = await publishing.settled(run_id)
    assert row["state"] == "published" and row["pull_request_url"] is None
    assert "pull request could not be opened" in row["error"]
    assert "token lacks write:repository" in row["error"]
    assert "forgejo-secret-token" not in row["error"]
    assert publishing.server.refs(TARGET_REPO)[changes_ref(str(run_id), 1)] == history.tip


async def test_a_pending_publication_whose_workflow_was_terminated_is_failed_and_publishes_again(
    publishing: Publishing, temporal_client: Client
) -> None:
    history = publishing.history()
    run_id = await seed_published_candidate(publishing.seeded, history)
    publishing.server.stall_fetch = 60.0  # the push waits: the publication stays pending
    first = await publishing.publish(run_id)
    assert first.status_code == 202, first.text
    handle = temporal_client.get_workflow_handle(publication_workflow_id(str(run_id)))
    await handle.terminate(reason="an operator of Temporal ended it")
    publishing.server.stall_fetch = None
    row = await publishing.db.fetchrow(
        "SELECT * FROM ops_run_publications WHERE run_id = $1", run_id
    )
    assert (
        row is not None and row["state"] == "pending"
    )  # nothing recorded a result: this is what is reconciled
    again = await publishing.publish(run_id)
    assert again.status_code == 202, again.text
    entries = await publishing.audit(run_id)
    raw = entries[-1]["details"]
    details = json.loads(raw) if isinstance(raw, str) else raw
    assert details["reconciled"] == "workflow_terminated"
    assert details["after_failure"] is True
    row = await publishing.settled(run_id)
    assert row["state"] == "published", row["error"]
    assert publishing.server.refs(TARGET_REPO)[changes_ref(str(run_id), 1)] == history.tip
    assert receive_pack_posts(publishing.server) == 1
