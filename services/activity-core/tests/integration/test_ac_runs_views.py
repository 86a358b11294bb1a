"""The queue-wide runs views: GET /ops-runs' new filters (automation, worker, time window)
with keyset pages, the runs summary, and the dead letter with errors and evidence."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from ac_fires import HARNESS_EVIDENCE
from ac_testkit import DEFINITION_ID, WORKER_ID, AppClient, SeededQueue

OTHER_DEFINITION = uuid.UUID("00000000-0000-4000-8000-00000000d002")
EVIDENCE = {
    "execution_evidence": {
        "request_id": "req-1",
        "contract_version": "1.0",
        **HARNESS_EVIDENCE,
        "outcome": "failed",
        "duration_s": 12.4,
    }
}


async def other_definition(db: asyncpg.Connection) -> uuid.UUID:
    await db.execute(
        """INSERT INTO activity_definitions (id, slug, title, definition, content_digest)
           VALUES ($1, 'other-activity', 'Other', '{}'::jsonb, 'x')""",
        OTHER_DEFINITION,
    )
    return OTHER_DEFINITION


async def listed(api: AppClient, **params: Any) -> list[str]:
    response = await api.http.get("/ops-runs", params=params, headers=api.operator_headers())
    assert response.status_code == 200, response.text
    return [run["id"] for run in response.json()["runs"]]


async def test_the_automation_worker_and_window_filters_combine(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    other = await other_definition(db)
    base = datetime(2026, 3, 1, 12, tzinfo=UTC)
    mine_old = await seeded.run(created_at=base - timedelta(days=2))
    mine_new = await seeded.run(
        created_at=base,
        state="claimed",
        claim_owner=WORKER_ID,
        lease_until=datetime.now(UTC) + timedelta(hours=1),
        attempt=1,
    )
    theirs = await seeded.run(
        created_at=base + timedelta(hours=1),
        activity_definition_id=other,
        state="failed",
        claim_owner="rein-aharness@other",
        attempt=1,
    )

    assert await listed(api, automation="test-activity") == [str(mine_new), str(mine_old)]
    assert await listed(api, automation=str(DEFINITION_ID)) == [str(mine_new), str(mine_old)]
    assert await listed(api, automation="other-activity") == [str(theirs)]
    assert await listed(api, worker=WORKER_ID) == [str(mine_new)]
    assert await listed(api, worker="rein-aharness@other") == [str(theirs)]
    assert await listed(api, worker="nobody") == []
    # created_after <= created_at < created_before
    assert await listed(api, created_after=base.isoformat()) == [str(theirs), str(mine_new)]
    assert await listed(api, created_before=base.isoformat()) == [str(mine_old)]
    assert await listed(
        api,
        created_after=(base - timedelta(days=3)).isoformat(),
        created_before=(base + timedelta(minutes=1)).isoformat(),
    ) == [str(mine_new), str(mine_old)]
    assert await listed(api, automation="test-activity", created_after=base.isoformat()) == [
        str(mine_new)
    ]
    # two definition filters that disagree match nothing
    assert (
        await listed(api, automation="other-activity", activity_definition_id=str(DEFINITION_ID))
        == []
    )


async def test_keyset_pages_hold_under_the_new_filters(api: AppClient, seeded: SeededQueue) -> None:
    created = await seeded.runs(17)
    window: dict[str, Any] = {
        "automation": "test-activity",
        "created_after": (datetime.now(UTC) - timedelta(days=2)).isoformat(),
        "limit": 4,
    }
    seen = [run["id"] for page in await api.pages("/ops-runs", **window) for run in page["runs"]]
    assert seen == [str(r) for r in reversed(created)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"created_after": "2026-03-01T12:00:00"}, "created_after"),  # no timezone
        ({"created_before": "yesterday"}, "created_before"),
        (
            {"created_after": "2026-03-02T00:00:00Z", "created_before": "2026-03-01T00:00:00Z"},
            "created_before",
        ),
        # valid ISO times whose UTC value is outside what the database takes
        ({"created_after": "0001-01-01T00:00:00+14:00"}, "created_after"),
        ({"created_before": "9999-12-31T23:00:00-14:00"}, "created_before"),
        ({"worker": "has space"}, "worker"),
        ({"automation": ""}, "automation"),
        ({"automation": "x" * 129}, "automation"),
    ],
)
async def test_bad_filters_are_invalid_request_naming_the_field(
    api: AppClient, params: dict[str, str], field: str
) -> None:
    response = await api.http.get("/ops-runs", params=params, headers=api.operator_headers())
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "invalid_request"
    assert ["query", field] in [e["loc"] for e in body["errors"]], body


async def test_an_unknown_automation_is_not_found(api: AppClient) -> None:
    for path in ("/ops-runs", "/ops/runs/dead-letter"):
        response = await api.http.get(
            path, params={"automation": "no-such-thing"}, headers=api.operator_headers()
        )
        assert response.status_code == 404, response.text
        assert response.json() == {"code": "not_found", "detail": "no automation no-such-thing"}


async def test_the_summary_counts_the_live_queue_and_a_window_of_terminal_runs(
    api: AppClient, seeded: SeededQueue
) -> None:
    now = datetime.now(UTC)
    empty = await api.http.get("/ops/runs/summary", headers=api.operator_headers())
    assert empty.status_code == 200, empty.text
    assert {k: v for k, v in empty.json().items() if k not in ("as_of", "terminal_since")} == {
        "open": 0,
        "claimed": 0,
        "stalled": 0,
        "oldest_open": None,
        "succeeded": 0,
        "failed": 0,
        "expired": 0,
    }

    oldest_low = await seeded.run(priority="low", created_at=now - timedelta(hours=5))
    await seeded.run(priority="high", created_at=now - timedelta(hours=1))
    await seeded.run(priority="medium", created_at=now - timedelta(hours=2))
    for lease in (timedelta(hours=1), -timedelta(minutes=1)):
        await seeded.run(state="claimed", claim_owner=WORKER_ID, lease_until=now + lease, attempt=1)
    await seeded.run(state="succeeded", claim_owner=WORKER_ID, attempt=1)
    await seeded.run(state="failed", claim_owner=WORKER_ID, attempt=1)
    await seeded.run(
        state="failed", claim_owner=WORKER_ID, attempt=1, created_at=now - timedelta(days=3)
    )
    await seeded.run(state="expired", claim_owner=WORKER_ID, attempt=3)

    body = (await api.http.get("/ops/runs/summary", headers=api.operator_headers())).json()
    assert (body["open"], body["claimed"], body["stalled"]) == (3, 2, 1)
    # by default terminal runs of the last 24 h: the failure of three days ago is not one
    assert (body["succeeded"], body["failed"], body["expired"]) == (1, 1, 1)
    assert body["oldest_open"]["id"] == str(oldest_low)
    assert 5 * 3600 - 60 < body["oldest_open"]["age_seconds"] < 5 * 3600 + 60
    as_of = datetime.fromisoformat(body["as_of"])
    terminal_since = datetime.fromisoformat(body["terminal_since"])
    assert as_of - terminal_since == timedelta(hours=24)

    week = (now - timedelta(days=7)).isoformat()
    body = (
        await api.http.get(
            "/ops/runs/summary", params={"since": week}, headers=api.operator_headers()
        )
    ).json()
    assert (body["succeeded"], body["failed"], body["expired"]) == (1, 2, 1)
    for since in ("2026-01-01", "0001-01-01T00:00:00+14:00"):
        bad = await api.http.get(
            "/ops/runs/summary", params={"since": since}, headers=api.operator_headers()
        )
        assert bad.status_code == 422, bad.text
        assert bad.json()["errors"][0]["loc"] == ["query", "since"]


async def test_the_dead_letter_shows_failed_and_expired_runs_with_error_and_evidence(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    now = datetime.now(UTC)
    other = await other_definition(db)
    failed = await seeded.run(
        state="failed",
        claim_owner=WORKER_ID,
        attempt=2,
        last_error="llm timeout\nafter 30 s",
        result={**EVIDENCE, "tool_output": "never shown"},
        created_at=now - timedelta(minutes=3),
    )
    expired = await seeded.run(
        state="expired", claim_owner=WORKER_ID, attempt=3, created_at=now - timedelta(minutes=2)
    )
    theirs = await seeded.run(
        state="failed",
        claim_owner=WORKER_ID,
        attempt=1,
        activity_definition_id=other,
        created_at=now - timedelta(minutes=1),
    )
    await seeded.run(state="succeeded", claim_owner=WORKER_ID, attempt=1)
    await seeded.run()

    response = await api.http.get("/ops/runs/dead-letter", headers=api.operator_headers())
    assert response.status_code == 200, response.text
    runs = response.json()["runs"]
    assert [run["id"] for run in runs] == [str(theirs), str(expired), str(failed)]
    shown = runs[2]
    assert shown["automation"] == "test-activity"
    assert shown["last_error"] == "llm timeout after 30 s"
    assert shown["execution_evidence"] == {**HARNESS_EVIDENCE, "outcome": "failed"}
    assert "never shown" not in response.text
    assert runs[0]["automation"] == "other-activity"

    only_mine = await api.http.get(
        "/ops/runs/dead-letter",
        params={"automation": "test-activity"},
        headers=api.operator_headers(),
    )
    assert [run["id"] for run in only_mine.json()["runs"]] == [str(expired), str(failed)]

    # requeued runs stay, with their successor named; `requeued` filters on it
    headers = {**api.operator_headers(), "Idempotency-Key": "dl"}
    successor = (await api.http.post(f"/ops-runs/{failed}/requeue", headers=headers)).json()
    runs = (await api.http.get("/ops/runs/dead-letter", headers=api.operator_headers())).json()[
        "runs"
    ]
    assert runs[2]["requeued_as"] == [successor["id"]]
    handled = await api.http.get(
        "/ops/runs/dead-letter", params={"requeued": "true"}, headers=api.operator_headers()
    )
    assert [run["id"] for run in handled.json()["runs"]] == [str(failed)]
    waiting = await api.http.get(
        "/ops/runs/dead-letter", params={"requeued": "false"}, headers=api.operator_headers()
    )
    assert [run["id"] for run in waiting.json()["runs"]] == [str(theirs), str(expired)]


async def test_dead_letter_pages_visit_every_run_once(api: AppClient, seeded: SeededQueue) -> None:
    now = datetime.now(UTC)
    made = [
        await seeded.run(
            state=("failed", "expired")[n % 2],
            claim_owner=WORKER_ID,
            attempt=1,
            created_at=now - timedelta(seconds=n),
        )
        for n in range(11)
    ]
    pages = await api.pages("/ops/runs/dead-letter", limit=3)
    seen = [run["id"] for page in pages for run in page["runs"]]
    assert seen == [str(r) for r in made]
    forged = await api.http.get(
        "/ops/runs/dead-letter", params={"cursor": "nope!"}, headers=api.operator_headers()
    )
    assert forged.status_code == 422
    assert forged.json()["errors"][0]["loc"] == ["query", "cursor"]
