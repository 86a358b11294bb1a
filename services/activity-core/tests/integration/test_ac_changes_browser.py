"""A run's Changes section in a real browser (Playwright, Debian's chromium): an operator
opens a succeeded run, reads its commits, its files and the diff (additions and deletions
marked), follows a file's link to its diff and takes the patch; the page runs no script
and loads nothing but its own stylesheet (the CSP holds).

The README's screenshot of the section (docs/img/ops-ui-changes.png) is a copy of the one
taken here (tests/artifacts/ops-ui-changes.png)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from ac_browser import ARTIFACTS, chromium, sign_in
from ac_browser import served as serve_app
from ac_changes import ChangedRuns
from ac_ui import ALICE, named_operators
from activity_core.changes.anchors import change_anchor

BRIEF = """# Morning brief, 7 December

## Queue
- 3 runs succeeded overnight, none failed.
- The oldest open run waited 4 min.

## Notes
- Renew the forge token before Friday.
"""


@pytest.fixture
def base_url(db_dsn: str, tmp_path: Path) -> Iterator[str]:
    path = named_operators(tmp_path / "operators.json")
    with serve_app(db_dsn, ACTIVITY_CORE_OPERATORS_FILE=path) as url:
        yield url


async def test_an_operator_reads_what_a_succeeded_run_changed(
    base_url: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    changed = await ChangedRuns(db, tmp_path / "repos").changed(
        [
            ({"briefs/2026-12-07.md": BRIEF}, "brief: morning brief for 7 December"),
            (
                {"briefs/index.md": "# Briefs\n\n- [7 December](2026-12-07.md)\n- 6 December\n"},
                "brief: list it in the index",
            ),
        ],
        setup={"briefs/index.md": "# Briefs\n\n- 6 December\n- 5 December\n"},
    )
    await db.execute("UPDATE ops_runs SET title = 'Morning brief' WHERE id = $1", changed.run_id)
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1100, "height": 900})
        # console errors (the browser's own favicon request is one: the UI has none)
        blocked: list[str] = []
        page.on(
            "console",
            lambda m: blocked.append(m.text) if m.type == "error" else None,
        )
        missing: list[str] = []
        page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
        await sign_in(page, base_url, "alice", ALICE, f"/ops/ui/runs/{changed.run_id}")
        section = page.locator("section.changes")
        commits = await section.locator("[data-field=commits] .subject").all_inner_texts()
        assert commits == ["brief: morning brief for 7 December", "brief: list it in the index"]
        rows = await section.locator("[data-field=files] tbody tr").all_inner_texts()
        # the deletions column says U+2212, the minus sign
        assert [r.split("\t") for r in rows] == [
            ["briefs/2026-12-07.md", "added", "+8", "\u22120"],
            ["briefs/index.md", "modified", "+1", "\u22121"],
        ]
        index = page.locator(f"#{change_anchor('briefs/index.md')}")
        assert await index.locator(".d-add").all_inner_texts() == ["+- [7 December](2026-12-07.md)"]
        assert await index.locator(".d-del").all_inner_texts() == ["-- 5 December"]
        # the marks are the stylesheet's: an added line is green on green
        color = await index.locator(".d-add").first.evaluate(
            "e => getComputedStyle(e).backgroundColor"
        )
        assert color == "rgb(230, 244, 234)"
        await section.locator(f"a[href='#{change_anchor('briefs/index.md')}']").click()
        assert page.url.endswith(f"#{change_anchor('briefs/index.md')}")

        href = await section.locator("[data-field=patch-link]").get_attribute("href")
        patch = await page.context.request.get(base_url + (href or ""))
        assert patch.status == 200
        assert (await patch.body()).startswith(b"From " + changed.commits[0].encode())
        assert [url for url in missing if not url.endswith("/favicon.ico")] == []
        # nothing refused by the CSP (Chromium reports each refusal as "Refused to ...")
        assert [text for text in blocked if "Refused" in text] == []

        await page.evaluate("window.scrollTo(0, 0)")
        await section.screenshot(path=str(ARTIFACTS / "ops-ui-changes.png"))
