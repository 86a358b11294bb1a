"""An operator publishes a run's changes from the ops UI in a real browser (Playwright,
Debian's chromium): opens the succeeded run, reads its diff in the Changes section,
presses Publish, and sees the branch and the pull-request link once
PublishChangesWorkflow (the real Temporal dev server, a worker in this process) pushed it
to the real git server; the pull request is a respx Forgejo's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client

from ac_browser import ARTIFACTS, chromium, sign_in
from ac_browser import served as serve_app
from ac_publication_kit import (
    PR_URL,
    TARGET_REPO,
    publishing_worker,
    run_history,
    seed_published_candidate,
)
from ac_testkit import SeededQueue
from ac_ui import ALICE
from activity_core.publication.remote_git import changes_ref
from activity_core.temporal.dev_server import DevServer
from ops_testsupport.git_server import GitServer


@pytest.fixture
async def world(
    temporal_client: Client,
    temporal_server: DevServer,
    db_dsn: str,
    git_server: GitServer,
    tmp_path: Path,
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    async with publishing_worker(
        temporal_client, temporal_server.address, db_dsn, git_server, tmp_path, "ac-publish-ui"
    ) as (env, _):
        with serve_app(db_dsn, **env) as url:
            yield url, env


async def test_an_operator_reads_the_diff_publishes_and_sees_the_branch_and_pull_request(
    world: tuple[str, dict[str, Any]],
    db: asyncpg.Connection,
    git_server: GitServer,
    tmp_path: Path,
) -> None:
    base_url, _ = world
    history = run_history(
        git_server, tmp_path / "work", files={"briefs/two.md": "a <b>bold</b> brief\n"}
    )
    run_id = await seed_published_candidate(SeededQueue(db), history)
    path = f"/ops/ui/runs/{run_id}"
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1100, "height": 1400})
        await sign_in(page, base_url, "alice", ALICE, path)
        # the diff: its files, the added line (escaped, shown as text)
        files = page.locator("[data-field=file-diff]")
        assert await files.count() == 2
        assert "briefs/two.md" in await files.nth(1).inner_text()
        assert "+a <b>bold</b> brief" in await files.nth(1).locator("pre.diff").inner_text()
        state = page.locator("[data-field=publication_state]")
        assert "Not published" in await state.inner_text()
        await page.screenshot(path=str(ARTIFACTS / "ops-ui-run-changes.png"), full_page=True)

        await page.click("form[data-action=publish] button[type=submit]")
        await page.wait_for_url(f"**{path}?done=publishing#publication")
        ref = changes_ref(str(run_id), 1)
        async with asyncio.timeout(60):
            while (
                await state.inner_text() != "published"
                or not await page.locator("[data-field=pull_request_url]").count()
            ):
                await asyncio.sleep(0.5)
                await page.reload()
        assert await page.locator("[data-field=publication_ref]").inner_text() == ref
        link = page.locator("[data-field=pull_request_url]")
        assert await link.get_attribute("href") == PR_URL
        assert await link.get_attribute("rel") == "noopener noreferrer"
        assert await page.locator("form[data-action=publish]").count() == 0
        await page.screenshot(path=str(ARTIFACTS / "ops-ui-run-published.png"), full_page=True)
    assert git_server.refs(TARGET_REPO)[ref] == history.tip
