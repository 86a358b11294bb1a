"""The ops UI's operator plane against the real database: the runs view (filters, pages,
counts, the oldest open run), a run's page (explain, audit, the forms its state allows),
the dead letter (requeue one, a selection, everything not yet requeued), the workers, and
the forms that act, as the named operator who signed in. Browser-level flows are in
test_ac_ui_browser_operator.py."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ac_testkit import WORKER_ID, AppClient, SeededQueue
from ac_ui import (
    ALICE,
    BOB,
    cancel_form,
    csrf_in,
    csrf_of,
    named_operators,
    now,
    post_form,
    session,
    signed_in,
)


@pytest.fixture
async def named_api(tmp_path: Path, app_factory: Any) -> AppClient:
    path = named_operators(tmp_path / "operators.json")
    api: AppClient = await app_factory(ACTIVITY_CORE_OPERATORS_FILE=path)
    return api


def rows_shown(html: str) -> list[str]:
    return re.findall(r'<tr data-run="([0-9a-f-]{36})"', html)


def actions_offered(html: str) -> list[str]:
    return re.findall(r'data-action="([a-z-]+)"', html)


# -- the runs view ------------------------------------------------------------------------


async def test_the_runs_view_counts_the_queue_and_names_the_oldest_open_run(
    api: AppClient, seeded: SeededQueue
) -> None:
    oldest = await seeded.run(state="open", created_at=now() - timedelta(hours=3, minutes=5))
    await seeded.run(state="open", created_at=now() - timedelta(minutes=5))
    await seeded.run(
        state="claimed",
        claim_owner=WORKER_ID,
        lease_until=now() + timedelta(minutes=10),
        attempt=1,
    )
    await seeded.run(state="failed", attempt=1, last_error="boom", created_at=now())
    cookie = await signed_in(api.http)
    page = await api.http.get("/ops/ui/runs", headers=session(cookie))
    assert page.status_code == 200
    counts = dict(re.findall(r'data-state="([a-z]+)">[a-z]+ <b>(\d+)</b>', page.text))
    assert counts == {
        "open": "2",
        "claimed": "1",
        "stalled": "0",
        "succeeded": "0",
        "failed": "1",
        "expired": "0",
    }
    assert f'href="/ops/ui/runs/{oldest}">3 h 5 min old</a>' in page.text
    assert len(rows_shown(page.text)) == 4


async def test_the_runs_view_filters_by_every_field_and_pages(
    api: AppClient, seeded: SeededQueue
) -> None:
    base = now() - timedelta(hours=2)
    wanted = [
        await seeded.run(
            state="failed",
            labels=["nightly", "fi"],
            target_repo="research/briefs",
            claim_owner="worker-a@h1",
            attempt=1,
            created_at=base + timedelta(minutes=i),
        )
        for i in range(60)
    ]
    await seeded.run(state="failed", labels=["other"], created_at=base)
    await seeded.run(state="open", labels=["nightly"], created_at=base)
    await seeded.run(state="failed", labels=["nightly"], target_repo="other/repo", created_at=base)
    cookie = await signed_in(api.http)
    query = {
        "state": "failed",
        "label": "nightly",
        "automation": "test-activity",
        "target_repo": "research/briefs",
        "worker": "worker-a@h1",
        "created_after": (base - timedelta(minutes=1)).astimezone().isoformat(),
        "created_before": (now() + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S"),
    }
    first = await api.http.get("/ops/ui/runs", params=query, headers=session(cookie))
    assert first.status_code == 200, first.text
    shown = rows_shown(first.text)
    assert len(shown) == 50
    assert shown == [str(r) for r in reversed(wanted)][:50]
    # the filter form keeps its values; the next page link keeps the filters
    assert 'value="research/briefs"' in first.text
    (next_link,) = re.findall(r'href="(/ops/ui/runs\?[^"]+)" rel="next"', first.text)
    second = await api.http.get(next_link.replace("&amp;", "&"), headers=session(cookie))
    assert rows_shown(second.text) == [str(r) for r in reversed(wanted)][50:]
    assert 'rel="next"' not in second.text


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "bogus"}, "state"),
        ({"label": "a,b"}, "label"),
        ({"label": "x" * 101}, "label"),
        ({"worker": "has space"}, "worker"),
        ({"automation": "nul\x00here"}, "automation"),
        ({"target_repo": "bidi\u202erepo"}, "target_repo"),
        ({"created_after": "0001-01-01T00:00:00+14:00"}, "created_after"),
        ({"created_after": "9999-12-31T23:59:59-14:00"}, "created_after"),
        ({"created_before": "yesterday"}, "created_before"),
        (
            {"created_after": "2026-01-02T00:00", "created_before": "2026-01-01T00:00"},
            "created_before",
        ),
        ({"cursor": "x" * 300}, "cursor"),
    ],
)
async def test_a_bad_filter_value_is_shown_next_to_its_field(
    api: AppClient, seeded: SeededQueue, params: dict[str, str], field: str
) -> None:
    await seeded.run(state="open")
    cookie = await signed_in(api.http)
    page = await api.http.get("/ops/ui/runs", params=params, headers=session(cookie))
    assert page.status_code == 200
    assert f"<li><code>{field}</code>:" in page.text
    assert rows_shown(page.text) == []


async def test_a_cursor_that_decodes_to_nothing_sensible_is_not_a_500(
    api: AppClient, seeded: SeededQueue
) -> None:
    await seeded.run(state="open")
    cookie = await signed_in(api.http)
    for cursor in ("not-a-cursor", "MDAwMQ", "eyJhIjoxfQ", "%00"):
        page = await api.http.get(
            "/ops/ui/runs", params={"cursor": cursor}, headers=session(cookie)
        )
        assert page.status_code in (200, 422), (cursor, page.status_code)
        assert "text/html" in page.headers["content-type"]


async def test_an_unknown_automation_filter_is_a_not_found_page(
    api: AppClient, seeded: SeededQueue
) -> None:
    cookie = await signed_in(api.http)
    page = await api.http.get(
        "/ops/ui/runs", params={"automation": "nope"}, headers=session(cookie)
    )
    assert page.status_code == 404 and "text/html" in page.headers["content-type"]


# -- a run's page -----------------------------------------------------------------------


async def test_a_runs_page_explains_it_and_offers_what_its_state_allows(
    api: AppClient, seeded: SeededQueue
) -> None:
    cookie = await signed_in(api.http)
    offered: dict[str, list[str]] = {}
    for state in ("open", "claimed", "succeeded", "failed", "expired"):
        extra: dict[str, Any] = {}
        if state == "claimed":
            extra = {"claim_owner": WORKER_ID, "lease_until": now() + timedelta(minutes=5)}
        run = await seeded.run(state=state, attempt=0 if state == "open" else 1, **extra)
        page = await api.http.get(f"/ops/ui/runs/{run}", headers=session(cookie))
        assert page.status_code == 200, page.text
        assert 'data-field="reasons"' in page.text
        offered[state] = actions_offered(page.text)
        refresh = '<meta http-equiv="refresh"' in page.text
        assert refresh == (state in ("open", "claimed"))
    assert offered == {
        "open": ["cancel"],
        "claimed": ["cancel"],
        "succeeded": [],
        "failed": ["requeue"],
        "expired": ["requeue"],
    }
    open_run = await seeded.run(state="open")
    page = await api.http.get(f"/ops/ui/runs/{open_run}", headers=session(cookie))
    # the open run of the loop above is older: explain says it is ahead
    assert '<code class="reason-code">queued_behind</code> 1 open run(s)' in page.text


async def test_a_viewer_and_a_header_credential_see_no_forms(
    named_api: AppClient, seeded: SeededQueue
) -> None:
    failed = await seeded.run(state="failed", attempt=1)
    viewer = await signed_in(named_api.http, BOB, "bob")
    for path in (f"/ops/ui/runs/{failed}", "/ops/ui/dead-letter"):
        page = await named_api.http.get(path, headers=session(viewer))
        assert page.status_code == 200
        assert actions_offered(page.text) == [], path
        assert 'name="run_id"' not in page.text
        assert "(viewer)" in page.text
        by_header = await named_api.http.get(path, headers={"authorization": f"Bearer {ALICE}"})
        assert by_header.status_code == 200 and actions_offered(by_header.text) == []


@pytest.mark.parametrize("ref", ["not-a-uuid", "00000000-0000-4000-8000-000000000000"])
async def test_an_unknown_run_is_a_not_found_page(api: AppClient, ref: str) -> None:
    cookie = await signed_in(api.http)
    page = await api.http.get(f"/ops/ui/runs/{ref}", headers=session(cookie))
    assert page.status_code == 404 and "Not found" in page.text


# -- acting -----------------------------------------------------------------------------


async def test_requeue_from_a_runs_page_is_the_named_operators_and_repeats_safely(
    named_api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    failed = await seeded.run(state="failed", attempt=3, last_error="boom")
    before = dict(await seeded.row(failed))
    alice = await signed_in(named_api.http, ALICE, "alice")
    csrf = await csrf_of(named_api.http, alice, f"/ops/ui/runs/{failed}")
    first = await post_form(
        named_api.http, f"/ops/ui/runs/{failed}/requeue", {"csrf_token": csrf}, alice
    )
    assert first.status_code == 303
    location = first.headers["location"]
    assert location.endswith("?done=requeued")
    successor = uuid.UUID(location.split("/")[-1].split("?")[0])
    row = await seeded.row(successor)
    assert (row["state"], row["attempt"], row["requeued_from"]) == ("open", 0, failed)
    assert dict(await seeded.row(failed)) == before  # the original never changes
    shown = await named_api.http.get(location, headers=session(alice))
    assert "Requeued: this is the new run." in shown.text
    assert f'href="/ops/ui/runs/{failed}"' in shown.text  # linked back
    again = await post_form(
        named_api.http, f"/ops/ui/runs/{failed}/requeue", {"csrf_token": csrf}, alice
    )
    assert again.headers["location"] == f"/ops/ui/runs/{successor}?done=repeated"
    assert await db.fetchval("SELECT count(*) FROM ops_runs") == 2
    entries = await db.fetch(
        "SELECT actor, role, action, outcome FROM ops_audit WHERE target = $1 ORDER BY id",
        f"ops_run:{failed}",
    )
    assert [tuple(e) for e in entries] == [
        ("alice", "operator", "requeue", "applied"),
        ("alice", "operator", "requeue", "repeated"),
    ]
    original_page = await named_api.http.get(f"/ops/ui/runs/{failed}", headers=session(alice))
    assert "alice" in original_page.text and "requeue" in original_page.text


async def test_cancel_from_a_runs_page(
    named_api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    claimed = await seeded.run(
        state="claimed", claim_owner=WORKER_ID, lease_until=now() + timedelta(minutes=5), attempt=1
    )
    alice = await signed_in(named_api.http, ALICE, "alice")
    csrf = await csrf_of(named_api.http, alice, f"/ops/ui/runs/{claimed}")
    blank = await cancel_form(named_api.http, claimed, {"csrf_token": csrf, "reason": " "}, alice)
    assert blank.status_code == 422
    assert (await seeded.row(claimed))["state"] == "claimed"
    done = await cancel_form(
        named_api.http, claimed, {"csrf_token": csrf, "reason": "wrong repository"}, alice
    )
    assert done.status_code == 303
    row = await seeded.row(claimed)
    assert (row["state"], row["cancelled_by"], row["claim_owner"]) == ("failed", "alice", None)
    assert "wrong repository" in row["last_error"]
    page = await named_api.http.get(done.headers["location"], headers=session(alice))
    assert 'data-field="cancelled_by">alice<' in page.text
    assert "wrong repository" in page.text
    # a second cancel finds a terminal run: a 409 page, nothing changed
    again = await cancel_form(
        named_api.http, claimed, {"csrf_token": csrf, "reason": "again"}, alice
    )
    assert again.status_code == 409 and "state_conflict" in again.text
    assert dict(await seeded.row(claimed)) == dict(row)


@pytest.mark.parametrize("reason", ["\x00", "\u200b\u200b", "   ", "\u2060"])
async def test_a_cancel_form_whose_reason_shows_nothing_changes_nothing(
    named_api: AppClient, seeded: SeededQueue, reason: str
) -> None:
    claimed = await seeded.run(
        state="claimed", claim_owner=WORKER_ID, lease_until=now() + timedelta(minutes=5), attempt=1
    )
    before = dict(await seeded.row(claimed))
    alice = await signed_in(named_api.http, ALICE, "alice")
    csrf = await csrf_of(named_api.http, alice, f"/ops/ui/runs/{claimed}")
    refused = await cancel_form(
        named_api.http, claimed, {"csrf_token": csrf, "reason": reason}, alice
    )
    assert refused.status_code == 422 and "invalid_request" in refused.text
    assert dict(await seeded.row(claimed)) == before
    done = await cancel_form(
        named_api.http, claimed, {"csrf_token": csrf, "reason": f"{reason}wrong repository"}, alice
    )
    assert done.status_code == 303
    stored = (await seeded.row(claimed))["last_error"]
    assert stored.rpartition(":")[2].strip() == "wrong repository", stored


async def test_a_viewers_forged_form_is_refused_and_audited(
    named_api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    failed = await seeded.run(state="failed", attempt=1)
    bob = await signed_in(named_api.http, BOB, "bob")
    # the viewer's own session token (its sign-out form carries one)
    csrf = await csrf_of(named_api.http, bob, f"/ops/ui/runs/{failed}")
    for path, fields in (
        (f"/ops/ui/runs/{failed}/requeue", {}),
        (f"/ops/ui/runs/{failed}/cancel", {"reason": "x"}),
        ("/ops/ui/dead-letter/requeue", {"run_id": str(failed)}),
    ):
        response = await post_form(named_api.http, path, {"csrf_token": csrf, **fields}, bob)
        assert response.status_code == 403, path
        assert "Viewers cannot act" in response.text
    assert await db.fetchval("SELECT count(*) FROM ops_runs") == 1
    refused = await db.fetch(
        "SELECT actor, role, action, outcome, code FROM ops_audit "
        "WHERE action <> 'ui.sign-in' ORDER BY id"
    )
    assert [tuple(r) for r in refused] == [
        ("bob", "viewer", "requeue", "refused", "forbidden"),
        ("bob", "viewer", "cancel", "refused", "forbidden"),
        ("bob", "viewer", "requeue", "refused", "forbidden"),
    ]


# -- the dead letter --------------------------------------------------------------------


async def test_the_dead_letter_requeues_one_a_selection_and_everything_not_yet_requeued(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    runs = [
        await seeded.run(
            state="failed" if i % 2 else "expired",
            attempt=1,
            last_error=f"error {i}",
            created_at=now() - timedelta(minutes=10 - i),
        )
        for i in range(6)
    ]
    cookie = await signed_in(api.http)
    page = await api.http.get("/ops/ui/dead-letter", headers=session(cookie))
    assert page.status_code == 200
    assert "error 3" in page.text
    assert sorted(re.findall(r'name="run_id" value="([0-9a-f-]+)"', page.text)) == sorted(
        str(r) for r in runs
    )
    csrf = csrf_in(page.text)

    one = await post_form(
        api.http, "/ops/ui/dead-letter/requeue", {"csrf_token": csrf, "one": str(runs[0])}, cookie
    )
    assert one.status_code == 200 and 'data-field="successor"' in one.text
    selection = [("csrf_token", csrf), ("selection", "1")] + [("run_id", str(r)) for r in runs[1:3]]
    chosen = await post_form(api.http, "/ops/ui/dead-letter/requeue", selection, cookie)
    assert chosen.status_code == 200
    assert len(re.findall(r'data-field="successor"', chosen.text)) == 2
    matching = await post_form(
        api.http,
        "/ops/ui/dead-letter/requeue",
        {"csrf_token": csrf, "matching": "1", "automation": "test-activity"},
        cookie,
    )
    assert matching.status_code == 200
    assert len(re.findall(r'data-field="successor"', matching.text)) == 3
    successors = await db.fetch(
        "SELECT requeued_from FROM ops_runs WHERE requeued_from IS NOT NULL"
    )
    assert sorted(str(r["requeued_from"]) for r in successors) == sorted(str(r) for r in runs)
    # now nothing is left to requeue; the view says which were requeued
    after = await api.http.get(
        "/ops/ui/dead-letter", params={"requeued": "no"}, headers=session(cookie)
    )
    assert 'data-field="empty"' in after.text
    nothing = await post_form(
        api.http, "/ops/ui/dead-letter/requeue", {"csrf_token": csrf, "matching": "1"}, cookie
    )
    assert nothing.status_code == 422


async def test_the_dead_letter_refuses_a_selection_over_the_bound(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    cookie = await signed_in(api.http)
    csrf = await csrf_of(api.http, cookie)
    fields = [("csrf_token", csrf)] + [("run_id", str(uuid.uuid4())) for _ in range(101)]
    response = await post_form(api.http, "/ops/ui/dead-letter/requeue", fields, cookie)
    assert response.status_code == 422
    garbage = await post_form(
        api.http, "/ops/ui/dead-letter/requeue", {"csrf_token": csrf, "run_id": "x"}, cookie
    )
    assert garbage.status_code == 404
    assert await db.fetchval("SELECT count(*) FROM ops_audit WHERE action = 'requeue'") == 0


async def test_the_dead_letter_filter_refuses_bad_values_in_place(api: AppClient) -> None:
    cookie = await signed_in(api.http)
    for params in ({"requeued": "maybe"}, {"automation": "\x00"}, {"cursor": "y" * 201}):
        page = await api.http.get("/ops/ui/dead-letter", params=params, headers=session(cookie))
        assert page.status_code == 200 and 'data-field="filter_errors"' in page.text


# -- workers ----------------------------------------------------------------------------


async def test_the_workers_page_shows_a_claiming_worker_and_what_it_holds(
    api: AppClient, seeded: SeededQueue
) -> None:
    run = await seeded.run(state="open", labels=["nightly"])
    claim = await api.claim(labels=["nightly"])
    assert claim.status_code == 200 and claim.json()["runs"][0]["id"] == str(run)
    cookie = await signed_in(api.http)
    page = await api.http.get("/ops/ui/workers", headers=session(cookie))
    assert page.status_code == 200
    assert f'<tr data-worker="{WORKER_ID}">' in page.text
    assert f'href="/ops/ui/runs/{run}"' in page.text
    assert 'data-field="state">alive<' in page.text
