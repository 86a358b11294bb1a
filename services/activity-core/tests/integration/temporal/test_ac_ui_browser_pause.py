"""Pause and resume an automation from the ops UI in a real browser (Playwright, Debian's
chromium), on the real Temporal dev server: the next fire times (read from the Temporal
Schedule itself) disappear with the pause and return with the resume, and the Schedule
and the database agree after each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ac_browser import ARTIFACTS, chromium, sign_in
from ac_browser import served as serve_app
from ac_temporal_kit import TemporalHarness
from ac_testkit import OPERATOR_TOKEN


@pytest.fixture
def base_url(temporal: TemporalHarness, db_dsn: str) -> Iterator[str]:
    with serve_app(
        db_dsn,
        TEMPORAL_ADDRESS=temporal.settings.temporal_address,
        TEMPORAL_TASK_QUEUE=temporal.task_queue,
    ) as url:
        yield url


async def schedule_paused(temporal: TemporalHarness, slug: str) -> bool:
    described = await temporal.applier.handle(slug).describe()
    return described.schedule.state.paused


async def test_an_operator_pauses_and_resumes_an_automation(
    temporal: TemporalHarness, base_url: str
) -> None:
    spec = await temporal.define(cron="15 5 * * *", timezone="UTC")
    path = f"/ops/ui/automations/{spec.id}"
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base_url, "operator", OPERATOR_TOKEN, path)
        fires = page.locator("[data-field=next_fires] time")
        assert await fires.count() >= 3
        assert await page.locator("[data-field=pause]").inner_text() == "active"

        await page.fill("#pause-reason", "the model provider is down")
        await page.click("form[data-action=pause] button[type=submit]")
        await page.wait_for_url(f"**{path}")
        assert await fires.count() == 0
        assert await page.locator("[data-field=next_fires]").inner_text() == "none while paused"
        pause_text = await page.locator("[data-field=pause]").inner_text()
        assert "paused" in pause_text and "the model provider is down" in pause_text
        assert await schedule_paused(temporal, spec.id)
        row = await temporal.pool.fetchrow(
            "SELECT paused, paused_by FROM activity_definitions WHERE slug = $1", spec.id
        )
        assert row is not None and tuple(row) == (True, "operator")
        await page.screenshot(path=str(ARTIFACTS / "ops-ui-automation-paused.png"))

        await page.click("form[data-action=resume] button[type=submit]")
        await page.wait_for_url(f"**{path}")
        assert await fires.count() >= 3
        assert await page.locator("[data-field=pause]").inner_text() == "active"
        assert not await schedule_paused(temporal, spec.id)
        audit = await page.locator("table.audit tbody tr").all_inner_texts()
        assert len(audit) == 2
        assert "automation.resume" in audit[0] and "automation.pause" in audit[1]
