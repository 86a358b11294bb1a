"""The operator plane in a real browser (Playwright, Debian's chromium): an operator
filters the runs view, requeues a failed run from the dead letter and sees a worker claim
the successor, cancels a claimed run; a viewer sees no action and a forged POST is
refused; a POST without the session's CSRF token, or from another site, changes nothing.
Pause and resume (which need Temporal) are in temporal/test_ac_ui_browser_pause.py.

The runs view's screenshot in the README (docs/img/ops-ui-runs.png) is a copy of the one taken here.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ac_browser import ARTIFACTS, chromium, sign_in
from ac_browser import served as serve_app
from ac_testkit import WORKER_ID, WORKER_TOKEN, SeededQueue
from ac_ui import ALICE, BOB, named_operators, now


@pytest.fixture
def base_url(db_dsn: str, tmp_path: Path) -> Iterator[str]:
    path = named_operators(tmp_path / "operators.json")
    with serve_app(db_dsn, ACTIVITY_CORE_OPERATORS_FILE=path) as url:
        yield url


async def claim(base: str, labels: list[str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base) as http:
        return await http.post(
            "/ops-runs/claim",
            json={"worker_id": WORKER_ID, **({"labels": labels} if labels else {})},
            headers={"authorization": f"Bearer {WORKER_TOKEN}"},
        )


async def test_an_operator_filters_the_runs_view(base_url: str, seeded: SeededQueue) -> None:
    for i in range(4):
        await seeded.run(
            state="failed",
            attempt=1,
            labels=["nightly", "fi"],
            title=f"Nightly brief {i}",
            last_error="the model timed out",
            created_at=now() - timedelta(minutes=30 - i),
        )
    await seeded.run(state="open", labels=["nightly"], title="Nightly brief (queued)")
    await seeded.run(
        state="claimed",
        labels=["weekly"],
        title="Weekly digest",
        claim_owner=WORKER_ID,
        lease_until=now() + timedelta(minutes=10),
        attempt=1,
        created_at=now() - timedelta(minutes=50),
    )
    await seeded.run(state="succeeded", attempt=1, labels=["weekly"], title="Weekly digest (done)")
    await seeded.run(
        state="open",
        labels=["adhoc"],
        title="Ad hoc check",
        priority="high",
        created_at=now() - timedelta(hours=2, minutes=14),
    )
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await sign_in(page, base_url, "alice", ALICE, "/ops/ui/runs")
        assert await page.locator("tr[data-run]").count() == 8
        assert "2 h 14 min old" in await page.locator("[data-field=oldest_open]").inner_text()
        # the README shows this one (copied to docs/img/ops-ui-runs.png by hand)
        await page.screenshot(path=str(ARTIFACTS / "ops-ui-runs.png"), full_page=True)

        await page.select_option("select[name=state]", "failed")
        await page.fill("input[name=label]", "nightly")
        await page.click("form.filters button[type=submit]")
        await page.wait_for_url("**/ops/ui/runs?state=failed&label=nightly**")
        states = await page.locator("tr[data-run] [data-field=state]").all_inner_texts()
        assert states == ["failed"] * 4
        assert await page.locator("input[name=label]").input_value() == "nightly"

        await page.fill("input[name=label]", "has,comma")
        await page.click("form.filters button[type=submit]")
        assert "label" in await page.locator("[data-field=filter_errors]").inner_text()
        assert await page.locator("tr[data-run]").count() == 0

        await page.click("text=Clear")
        assert await page.locator("tr[data-run]").count() == 8


async def test_requeue_from_the_dead_letter_and_see_the_successor_claimed(
    base_url: str, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    failed = await seeded.run(
        state="failed",
        attempt=3,
        labels=["nightly"],
        title="Nightly brief",
        last_error="the model timed out",
    )
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base_url, "alice", ALICE, "/ops/ui/dead-letter")
        card = page.locator(f"li.dead-run[data-run='{failed}']")
        assert "the model timed out" in await card.locator("[data-field=last_error]").inner_text()
        await card.locator("button[data-action=requeue]").click()
        successor_link = page.locator("[data-field=successor]")
        successor = (await successor_link.inner_text()).strip()
        await successor_link.click()
        await page.wait_for_url(f"**/ops/ui/runs/{successor}")
        assert await page.locator("[data-field=state]").inner_text() == "open"
        assert await page.locator("[data-field=requeued_from]").inner_text() == str(failed)

        claimed = await claim(base_url, ["nightly"])
        assert claimed.status_code == 200
        assert [r["id"] for r in claimed.json()["runs"]] == [successor]
        await page.reload()
        assert await page.locator("[data-field=state]").inner_text() == "claimed"
        assert await page.locator("[data-field=claim_owner]").inner_text() == WORKER_ID
        # the dead letter now links the failed run to it and offers no second requeue
        await page.goto(base_url + "/ops/ui/dead-letter")
        card = page.locator(f"li.dead-run[data-run='{failed}']")
        assert successor in await card.locator("[data-field=requeued_as]").inner_text()
        assert await card.locator("button[data-action=requeue]").count() == 0
    entry = await db.fetchrow("SELECT actor, outcome FROM ops_audit WHERE action = 'requeue'")
    assert entry is not None and tuple(entry) == ("alice", "applied")


async def test_requeue_a_selection_from_the_dead_letter(
    base_url: str, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    runs = [
        await seeded.run(state="expired", attempt=1, created_at=now() - timedelta(minutes=i))
        for i in range(3)
    ]
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base_url, "alice", ALICE, "/ops/ui/dead-letter")
        for run in runs[:2]:
            await page.check(f"input[name=run_id][value='{run}']")
        await page.click("button[data-action=requeue-selected]")
        outcomes = await page.locator("[data-field=outcome]").all_inner_texts()
        assert outcomes == ["201", "201"]
    requeued = {
        r["requeued_from"]
        for r in await db.fetch(
            "SELECT requeued_from FROM ops_runs WHERE requeued_from IS NOT NULL"
        )
    }
    assert requeued == set(runs[:2])


async def test_an_operator_cancels_a_claimed_run(
    base_url: str, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    await seeded.run(state="open", labels=["nightly"])
    claimed = await claim(base_url, ["nightly"])
    (run,) = claimed.json()["runs"]
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base_url, "alice", ALICE, f"/ops/ui/runs/{run['id']}")
        assert await page.locator("[data-field=state]").inner_text() == "claimed"
        await page.fill("#reason", "it targets the wrong repository")
        await page.click("form[data-action=cancel] button[type=submit]")
        await page.wait_for_url(f"**/ops/ui/runs/{run['id']}?done=cancelled")
        assert await page.locator("[data-field=state]").inner_text() == "failed"
        assert await page.locator("[data-field=cancelled_by]").inner_text() == "alice"
        assert "wrong repository" in await page.locator("[data-field=last_error]").inner_text()
        assert await page.locator("form[data-action=cancel]").count() == 0
    # the worker holding it learns it on its next heartbeat
    async with httpx.AsyncClient(base_url=base_url) as http:
        beat = await http.post(
            f"/ops-runs/{run['id']}/heartbeat",
            json={"worker_id": WORKER_ID, "attempt": run["attempt"]},
            headers={"authorization": f"Bearer {WORKER_TOKEN}"},
        )
    assert beat.status_code == 409 and beat.json()["code"] == "state_conflict"
    row = await db.fetchrow(
        "SELECT state, cancelled_by FROM ops_runs WHERE id = $1::uuid", run["id"]
    )
    assert row is not None and tuple(row) == ("failed", "alice")


async def test_a_viewer_sees_no_action_and_a_forged_post_is_refused(
    base_url: str, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    failed = await seeded.run(state="failed", attempt=1, last_error="boom")
    open_run = await seeded.run(state="open")
    before = [dict(r) for r in await db.fetch("SELECT * FROM ops_runs ORDER BY id")]
    async with chromium() as browser:
        context = await browser.new_context()
        page = await context.new_page()
        await sign_in(page, base_url, "bob", BOB, f"/ops/ui/runs/{failed}")
        assert "(viewer)" in await page.locator("header").inner_text()
        for path in (f"/ops/ui/runs/{failed}", f"/ops/ui/runs/{open_run}", "/ops/ui/dead-letter"):
            await page.goto(base_url + path)
            assert await page.locator("[data-action]").count() == 0, path
            assert await page.locator("input[name=run_id]").count() == 0, path
        # the viewer's own session token, from its sign-out form, on a hand-made POST
        csrf = await page.locator("input[name=csrf_token]").first.get_attribute("value")
        assert csrf
        for path, form in (
            (f"/ops/ui/runs/{failed}/requeue", {"csrf_token": csrf}),
            (f"/ops/ui/runs/{open_run}/cancel", {"csrf_token": csrf, "reason": "forged"}),
        ):
            response = await context.request.post(
                base_url + path, form=form, headers={"origin": base_url}, max_redirects=0
            )
            assert response.status == 403, path
            assert "Viewers cannot act" in await response.text()
    after = [dict(r) for r in await db.fetch("SELECT * FROM ops_runs ORDER BY id")]
    assert after == before
    codes = [
        tuple(r)
        for r in await db.fetch(
            "SELECT actor, outcome, code FROM ops_audit WHERE action <> 'ui.sign-in' ORDER BY id"
        )
    ]
    assert codes == [("bob", "refused", "forbidden")] * 2


class _EvilSite(http.server.BaseHTTPRequestHandler):
    """Another origin (another port of the same host: the same *site*, so a SameSite
    cookie alone would not stop it) that serves a form aimed at the ops UI."""

    target = ""

    def do_GET(self) -> None:
        body = (
            f'<form method="post" action="{self.target}">'
            '<input name="reason" value="forged"><input name="csrf_token" value="guess">'
            '<button id="go" type="submit">win a prize</button></form>'
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_a_post_without_the_csrf_token_or_from_another_site_changes_nothing(
    base_url: str, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    run = await seeded.run(state="open")
    before = [dict(r) for r in await db.fetch("SELECT * FROM ops_runs ORDER BY id")]
    evil = http.server.HTTPServer(("127.0.0.1", 0), _EvilSite)
    _EvilSite.target = f"{base_url}/ops/ui/runs/{run}/cancel"
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        async with chromium() as browser:
            context = await browser.new_context()
            page = await context.new_page()
            await sign_in(page, base_url, "alice", ALICE, f"/ops/ui/runs/{run}")
            # the operator's own browser, its session cookie, no token
            response = await context.request.post(
                f"{base_url}/ops/ui/runs/{run}/cancel",
                form={"reason": "no token"},
                headers={"origin": base_url},
                max_redirects=0,
            )
            assert response.status == 403
            assert "CSRF" in await response.text()
            # the same, from a page of another origin the operator opened
            await page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
            await page.click("#go")
            await page.wait_for_load_state()
            assert "Refused: another site" in await page.locator("h1").inner_text()
            await page.screenshot(path=str(ARTIFACTS / "ops-ui-forged-post.png"))
    finally:
        evil.shutdown()
        thread.join(timeout=5)
        evil.server_close()
    after = [dict(r) for r in await db.fetch("SELECT * FROM ops_runs ORDER BY id")]
    assert after == before
    assert await db.fetchval("SELECT count(*) FROM ops_audit WHERE action = 'cancel'") == 0
