"""The ops UI in a real browser: sign in through the form, open a completed run, read it
the way an operator would, on a phone-sized screen. Keeps a screenshot in tests/artifacts/.

Playwright drives Debian's chromium (ac_browser.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from ac_browser import ARTIFACTS, chromium, served
from ac_fires import SeededAutomations, at, completed_result
from ac_testkit import OPERATOR_TOKEN

SHA = "4f1c2d3e5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"
RUN_ID = "0b7e4c2a-6f1d-4d8e-9a3b-5c7d9e1f2a4b"
PATH = "briefs/2024-05-01 FI daily brief.md"
EXPECTED_HREF = (
    f"https://forgejo.coulomb.social/research/briefs/src/commit/{SHA}"
    "/briefs/2024-05-01%20FI%20daily%20brief.md"
)


@pytest.fixture
def base_url(db_dsn: str) -> Iterator[str]:
    with served(db_dsn) as url:
        yield url


@pytest.fixture
async def completed_run(db: asyncpg.Connection) -> AsyncIterator[str]:
    seed = SeededAutomations(db)
    a = await seed.automation(
        "fi-daily-brief", "FI daily brief", cron="0 6 * * 1-5", timezone="Europe/Berlin"
    )
    await seed.fire(
        a,
        started_at=at(0),
        finished_at=at(4),
        run_id=RUN_ID,
        trigger_key="scheduled",
        triggering_event_id="scheduled:2024-05-01T04:00:00+00:00",
        scheduled_for=at(0),
    )
    ops_run = await seed.ops_run(
        a,
        triggering_event_id="scheduled:2024-05-01T04:00:00+00:00",
        created_at=at(1),
        title="Research brief for 2024-05-01",
        labels=["automated", "research-brief"],
        state="succeeded",
        attempt=1,
        claim_owner="rein-aharness@railiance01",
        result=completed_result(path=PATH, head_after=SHA),
    )
    # published by an operator (as PublishChangesWorkflow records it): only now does the
    # artefact link to Forgejo (artefacts/links.py)
    await db.execute(
        """INSERT INTO ops_run_publications (run_id, attempt, state, ref, commit, requested_by,
               requested_at, published_at, workflow_id)
           VALUES ($1, 1, 'published', $2, $3, 'operator', now(), now(), 'w')""",
        ops_run,
        f"refs/heads/rein/{ops_run}/1",
        SHA,
    )
    yield f"/ops/ui/automations/fi-daily-brief/runs/{RUN_ID}"


async def test_an_operator_reads_a_completed_run_on_a_phone(
    base_url: str, completed_run: str
) -> None:
    served = base_url
    async with chromium() as browser:
        context = await browser.new_context(
            viewport={"width": 375, "height": 812}, device_scale_factor=2, is_mobile=True
        )
        page = await context.new_page()

        # Not signed in: the run page sends us to the login form, then back.
        await page.goto(served + completed_run)
        assert "/ops/ui/login" in page.url
        await page.fill("#name", "operator")
        await page.fill("#token", "not-the-token-0123456789")
        await page.click("button[type=submit]")
        assert await page.locator("[role=alert]").inner_text() == "Sign-in failed."
        await page.fill("#name", "operator")
        await page.fill("#token", OPERATOR_TOKEN)
        await page.click("button[type=submit]")
        await page.wait_for_url(served + completed_run)

        (cookie,) = [c for c in await context.cookies() if c["name"] == "ops_session"]
        assert cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict"
        assert cookie["path"] == "/ops/ui"
        assert OPERATOR_TOKEN not in cookie["value"]

        assert await page.locator("h1").inner_text() == "FI daily brief"
        card = page.locator("li.ops-run")
        assert await card.count() == 1
        assert "Research brief for 2024-05-01" in await card.locator("h3").inner_text()
        assert await card.locator("[data-field=state]").inner_text() == "succeeded"
        assert await card.locator("[data-field=attempt]").inner_text() == "1"
        assert (
            await card.locator("[data-field=claim_owner]").inner_text()
            == "rein-aharness@railiance01"
        )
        assert await card.locator("[data-field=resolved_model]").inner_text() == "claude-sonnet-4-6"
        assert (
            await card.locator("[data-field=profile_ref]").inner_text() == "harness.agent-dev@1.0.0"
        )
        link = card.locator("a.artefact")
        assert await link.inner_text() == PATH
        assert await link.get_attribute("href") == EXPECTED_HREF
        assert await link.get_attribute("rel") == "noopener noreferrer"

        # Finished work: no auto-refresh.
        assert await page.locator("meta[http-equiv=refresh]").count() == 0

        # Readable on a phone: nothing wider than the screen.
        overflow = await page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{overflow}px of horizontal overflow at 375px"
        await page.screenshot(path=str(ARTIFACTS / "ops-ui-run-detail-phone.png"), full_page=True)

        # The index and the automation page, on the same phone.
        await page.click("a.brand")
        assert "FI daily brief" in await page.locator("main").inner_text()
        assert await page.evaluate(
            "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
        await page.screenshot(path=str(ARTIFACTS / "ops-ui-index-phone.png"), full_page=True)

        # Signing out ends the browser's session.
        await page.click("text=Sign out")
        await page.wait_for_url("**/ops/ui/login")
        assert [c for c in await context.cookies() if c["name"] == "ops_session"] == []
        await page.goto(served + completed_run)
        assert "/ops/ui/login" in page.url

        desktop = await browser.new_page(viewport={"width": 1280, "height": 900})
        await desktop.set_extra_http_headers({"Authorization": f"Bearer {OPERATOR_TOKEN}"})
        await desktop.goto(served + completed_run)
        await desktop.screenshot(path=str(ARTIFACTS / "ops-ui-run-detail-desktop.png"))
