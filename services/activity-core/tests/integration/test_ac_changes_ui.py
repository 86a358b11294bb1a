"""The run page's Changes section on real PostgreSQL and real bundles: commits, files with
+/- counts, each file's diff with its lines marked, the links to the patch and the bundle
(served under the UI's session, whose cookie never opens the JSON API); hostile names
and content stay text; a diff over its bound says so."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ac_changes import HOSTILE_CONTENT, HOSTILE_NAME, QUOTED_NAME, ChangedRuns
from ac_testkit import AppClient
from ac_ui import ALICE, BOB, named_operators, session, signed_in
from activity_core.changes.anchors import change_anchor
from activity_core.changes.view import MAX_FILE_DIFF_BYTES
from activity_core.http.ui_pages import SECURITY_HEADERS
from ops_testsupport.changes_bundles import bundle_digest


@pytest.fixture
async def named_api(tmp_path: Path, app_factory: Any) -> AppClient:
    path = named_operators(tmp_path / "operators.json")
    api: AppClient = await app_factory(ACTIVITY_CORE_OPERATORS_FILE=path)
    return api


@pytest.fixture
def changed_runs(db: asyncpg.Connection, tmp_path: Path) -> ChangedRuns:
    return ChangedRuns(db, tmp_path)


class _Page(HTMLParser):
    """What a browser would build: the elements (tag, attributes) and the text of each
    element with an id or a class among `wanted`."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: dict[str, list[str]] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        key = attributes.get("class") if tag == "span" else None
        if tag not in ("br", "img", "input", "meta", "link"):
            self._open.append(key)

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1]:
            self.texts.setdefault(self._open[-1], []).append(data)


def parsed(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


async def test_the_changes_section_shows_commits_files_and_marked_diffs(
    named_api: AppClient, changed_runs: ChangedRuns
) -> None:
    changed = await changed_runs.changed(
        [
            ({"notes/a.md": "alpha\nbeta\n"}, "add notes"),
            ({"README.md": "hello, changed\n"}, "change the readme"),
        ]
    )
    viewer = await signed_in(named_api.http, BOB, "bob")
    response = await named_api.http.get(f"/ops/ui/runs/{changed.run_id}", headers=session(viewer))
    assert response.status_code == 200
    html = response.text
    page = parsed(html)
    assert '<h2 id="changes">Changes</h2>' in html
    assert "add notes" in html and "change the readme" in html
    assert changed.commits[0][:12] in html
    ids = {attrs.get("id") for _, attrs in page.tags}
    for path in ("notes/a.md", "README.md"):
        assert change_anchor(path) in ids
        assert ("a", {"href": f"#{change_anchor(path)}"}) in page.tags
    # files in git's order (by path), each diff's lines marked
    assert page.texts["d-add"] == ["+hello, changed", "+alpha", "+beta"]
    assert page.texts["d-del"] == ["-hello"]
    assert page.texts["d-hunk"] == ["@@ -1 +1 @@", "@@ -0,0 +1,2 @@"]
    links = {attrs.get("data-field"): attrs.get("href") for tag, attrs in page.tags if tag == "a"}
    assert links["patch-link"] == f"/ops/ui/runs/{changed.run_id}/changes.patch"
    assert links["bundle-link"] == f"/ops/ui/runs/{changed.run_id}/changes.bundle"
    assert (
        response.headers["content-security-policy"] == SECURITY_HEADERS["Content-Security-Policy"]
    )
    # no inline style or script anywhere: the CSP would refuse them
    assert not [t for t, a in page.tags if t in ("script", "style") or "style" in a]

    # the downloads, under the session
    patch = await named_api.http.get(links["patch-link"] or "", headers=session(viewer))
    assert patch.status_code == 200
    assert patch.headers["content-type"] == "application/mbox"
    assert patch.content.startswith(b"From " + changed.commits[0].encode())
    bundle = await named_api.http.get(links["bundle-link"] or "", headers=session(viewer))
    assert (bundle.status_code, bundle.content) == (200, changed.bundle)
    assert bundle.headers["x-changes-digest"] == bundle_digest(changed.bundle)
    assert bundle.headers["x-content-type-options"] == "nosniff"
    # without a session, the sign-in page; the session's cookie opens no JSON API
    named_api.http.cookies.clear()
    anonymous = await named_api.http.get(links["bundle-link"] or "")
    assert anonymous.status_code == 303 and "/ops/ui/login" in anonymous.headers["location"]
    api = await named_api.http.get(f"/ops-runs/{changed.run_id}/changes", headers=session(viewer))
    assert api.status_code == 401
    by_header = await named_api.http.get(
        links["patch-link"] or "", headers={"authorization": f"Bearer {ALICE}"}
    )
    assert by_header.status_code == 200


async def test_hostile_names_and_content_are_text_on_the_page(
    named_api: AppClient, changed_runs: ChangedRuns
) -> None:
    changed = await changed_runs.changed(
        [
            (
                {HOSTILE_NAME: HOSTILE_CONTENT, QUOTED_NAME: "x\n"},
                '<img src=x onerror=alert(3)> "subject"',
            )
        ]
    )
    cookie = await signed_in(named_api.http, ALICE, "alice")
    html = (
        await named_api.http.get(f"/ops/ui/runs/{changed.run_id}", headers=session(cookie))
    ).text
    page = parsed(html)
    assert not [t for t, _ in page.tags if t in ("script", "img")]
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.md" in html
    assert "&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(3)&gt;" in html
    # the newline in a path is shown as U+FFFD, the quote as an entity: it ends no attribute
    assert "docs/a &#34;quoted&#34;\ufffdname.txt" in html
    assert page.texts["d-add"] == ["+" + HOSTILE_CONTENT.rstrip("\n"), "+x"]
    ids = {attrs.get("id") for _, attrs in page.tags}
    assert {change_anchor(HOSTILE_NAME), change_anchor(QUOTED_NAME)} <= ids


async def test_a_diff_over_its_bound_is_cut_and_the_page_says_so(
    named_api: AppClient, changed_runs: ChangedRuns
) -> None:
    big = ("z" * 99 + "\n") * (MAX_FILE_DIFF_BYTES // 100 + 10)
    changed = await changed_runs.changed([({"big.txt": big}, "big")])
    cookie = await signed_in(named_api.http, ALICE, "alice")
    html = (
        await named_api.http.get(f"/ops/ui/runs/{changed.run_id}", headers=session(cookie))
    ).text
    assert f"Shown in part: a file&#39;s diff is shown up to {MAX_FILE_DIFF_BYTES} bytes." in html
    assert 'data-field="file-truncated"' in html
    shown = parsed(html).texts["d-add"]
    assert 0 < len(shown) < big.count("\n")


async def test_a_run_without_changes_says_so_and_unreadable_changes_do_not_break_the_page(
    named_api: AppClient, changed_runs: ChangedRuns
) -> None:
    plain = await changed_runs.run()
    cookie = await signed_in(named_api.http, ALICE, "alice")
    page = await named_api.http.get(f"/ops/ui/runs/{plain}", headers=session(cookie))
    assert page.status_code == 200
    assert "No changes are stored for this run's attempt." in page.text
    download = await named_api.http.get(
        f"/ops/ui/runs/{plain}/changes.patch", headers=session(cookie)
    )
    assert download.status_code == 404 and "not_found" in download.text

    good = await changed_runs.changed([({"a.md": "a\n"}, "a")])
    broken_run = await changed_runs.run()
    from ac_changes import store

    cut = good.bundle[: good.bundle.index(b"\n\n") + 2] + b"PACK" + b"\x00" * 40
    await store(
        changed_runs.conn, broken_run, 1, cut, good.baseline, good.head_after, [good.head_after]
    )
    page = await named_api.http.get(f"/ops/ui/runs/{broken_run}", headers=session(cookie))
    assert page.status_code == 200
    assert 'data-field="changes-error"' in page.text
    assert f'href="/ops/ui/runs/{broken_run}/changes.bundle"' in page.text
