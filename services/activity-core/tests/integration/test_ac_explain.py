"""GET /ops-runs/{id}/explain from real rows, claims and workers; and the label test it uses
held to what a real claim takes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from ac_testkit import WORKER_ID, AppClient, SeededQueue
from activity_core.operator.workers import filter_matches
from activity_core.queue.claim import ClaimSpec
from ops_contracts import LabelsMode


async def explain(api: AppClient, run_id: Any) -> dict[str, Any]:
    response = await api.http.get(f"/ops-runs/{run_id}/explain", headers=api.operator_headers())
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def codes(body: dict[str, Any]) -> list[str]:
    return [reason["code"] for reason in body["reasons"]]


def detail(body: dict[str, Any], code: str) -> str:
    return str(next(r["detail"] for r in body["reasons"] if r["code"] == code))


async def test_an_open_run_nobody_claims_for_and_the_runs_ahead_of_it(
    api: AppClient, seeded: SeededQueue
) -> None:
    now = datetime.now(UTC)
    run = await seeded.run(labels=["brief"], priority="medium", created_at=now - timedelta(hours=1))
    await seeded.run(labels=["other"], priority="high", created_at=now)  # ahead: priority
    await seeded.run(labels=["brief"], created_at=now - timedelta(hours=2))  # ahead: older
    await seeded.run(labels=["brief"], priority="low", created_at=now - timedelta(hours=9))

    body = await explain(api, run)
    assert body["run_id"] == str(run) and body["state"] == "open"
    assert codes(body) == ["no_matching_worker", "queued_behind"]
    assert "no worker has claimed in that time" in detail(body, "no_matching_worker")
    assert detail(body, "queued_behind").startswith("2 open run(s) are ahead of it")

    # a worker claiming other labels is named; then one whose filter matches
    assert (await api.claim(labels=["reports"])).json()["runs"] == []
    body = await explain(api, run)
    assert f"{WORKER_ID} (any of [reports])" in detail(body, "no_matching_worker")
    # (a claim's record without the claim: a real one would take the older brief run)
    api.app.state.sightings.record("rein-aharness@brief", ["brief", "x"], "any", 1)
    body = await explain(api, run)
    assert codes(body)[0] == "matching_workers"
    assert "rein-aharness@brief (any of [brief, x])" in detail(body, "matching_workers")
    # its claim takes the run ahead; holding it, the worker is busy
    await api.app.state.queue.claim(
        ClaimSpec("rein-aharness@brief", ["brief", "x"], LabelsMode.any, 1, 60, 0)
    )
    body = await explain(api, run)
    assert codes(body) == ["matching_workers_busy", "queued_behind"]
    assert detail(body, "queued_behind").startswith("1 open run(s) are ahead of it")


async def test_busy_workers_the_attempt_ceiling_and_a_paused_automation(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    now = datetime.now(UTC)
    run = await seeded.run(labels=["automated"], attempt=2, last_error="llm timeout")
    await seeded.run(
        state="claimed",
        claim_owner=WORKER_ID,
        lease_until=now + timedelta(minutes=5),
        attempt=1,
        labels=["automated"],
    )
    # the worker's last claim named "automated"; it holds one run, as many as it claims
    api.app.state.sightings.record(WORKER_ID, ["automated"], "any", 1)
    await db.execute("UPDATE activity_definitions SET paused = true")
    body = await explain(api, run)
    assert codes(body) == [
        "matching_workers_busy",
        "next_in_line",
        "last_attempt",
        "retried",
        "automation_paused",
    ]
    assert f"{WORKER_ID} (holds 1 of 1)" in detail(body, "matching_workers_busy")
    assert "attempt 3 of 3, the last" in detail(body, "last_attempt")
    assert detail(body, "retried").endswith("the last error: llm timeout")


async def test_claimed_then_cancelled_then_requeued(api: AppClient, seeded: SeededQueue) -> None:
    run = await seeded.run(labels=["automated"])
    claimed = (await api.claim(labels=["automated"], lease_seconds=600)).json()["runs"][0]
    body = await explain(api, run)
    assert codes(body) == ["claimed"]
    assert detail(body, "claimed").startswith(f"{WORKER_ID} holds it (attempt 1) until ")

    await seeded.expire_lease(run)
    body = await explain(api, run)
    assert codes(body) == ["lease_ended"]

    await api.http.post(
        f"/ops-runs/{claimed['id']}/cancel",
        json={"reason": "wrong target"},
        headers=api.operator_headers(),
    )
    body = await explain(api, run)
    assert body["state"] == "failed"
    assert codes(body) == ["cancelled", "requeue_possible"]
    assert "wrong target" in detail(body, "cancelled")

    successor = (
        await api.http.post(f"/ops-runs/{run}/requeue", headers=api.operator_headers())
    ).json()
    assert codes(await explain(api, run)) == ["cancelled", "requeued_as"]
    assert codes(await explain(api, successor["id"]))[-1] == "requeued_from"


async def test_succeeded_expired_and_missing_runs(api: AppClient, seeded: SeededQueue) -> None:
    done = await seeded.run(state="succeeded", claim_owner=WORKER_ID, attempt=1)
    assert codes(await explain(api, done)) == ["succeeded"]
    expired = await seeded.run(state="expired", claim_owner=WORKER_ID, attempt=3)
    assert codes(await explain(api, expired)) == ["expired", "requeue_possible"]
    missing = await api.http.get(
        "/ops-runs/00000000-0000-4000-8000-000000000000/explain", headers=api.operator_headers()
    )
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    bad = await api.http.get("/ops-runs/nope/explain", headers=api.operator_headers())
    assert bad.status_code == 422


CLAIM_FILTERS = [
    (None, "any"),
    (["a"], "any"),
    (["a", "b"], "any"),
    (["a", "b"], "all"),
    (["c", "d"], "all"),
    (["d"], "all"),
    (["e"], "any"),
]


@pytest.mark.parametrize(("claim_labels", "mode"), CLAIM_FILTERS)
async def test_filter_matches_says_what_a_real_claim_takes(
    api: AppClient,
    seeded: SeededQueue,
    db: asyncpg.Connection,
    claim_labels: list[str] | None,
    mode: str,
) -> None:
    subsets = [
        list(c) for n in range(0, 5) for c in itertools.combinations(["a", "b", "c", "d"], n)
    ]
    ids = {await seeded.run(labels=labels): labels for labels in subsets}
    claimed = await api.app.state.queue.claim(
        ClaimSpec(WORKER_ID, claim_labels, LabelsMode(mode), 100, 60, 0)
    )
    taken = {run["id"] for run in claimed}
    expected = {
        run_id for run_id, labels in ids.items() if filter_matches(claim_labels, mode, labels)
    }
    assert taken == expected
