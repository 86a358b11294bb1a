"""Fencing: a heartbeat or close that names an attempt other than the run's current one is
409 expired_lease and changes nothing, on every path that decides one.

The issue's scenario: a worker claims a run (attempt 1), its lease ends, the same worker
claims it again (attempt 2), and attempt 1's close arrives late. The owner and the live
lease both match, so only the attempt tells the two claims apart. The paths: both HTTP
doors (the worker fast path and the FastAPI routes), the one-statement close
(CLOSE_LEASED_UNGRANTED), the shared statement of closes that arrive together
(CLOSE_MANY_LEASED_UNGRANTED) and the locking transaction (decide_close).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from ac_testkit import WORKER_ID, AppClient, SeededQueue
from activity_core.queue import queries
from activity_core.queue.errors import QueueRefusal
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.service import QueueService
from ops_contracts import CloseDisposition, RefusalCode

RESULT = {"ok": True, "path": "briefs/today.md"}
GRANT = {
    "version": "1",
    "allowed_paths": ["briefs/"],
    "commit_count": {"min": 1, "max": 1},
    "publish": False,
}


async def snapshot(db: asyncpg.Connection, run_id: uuid.UUID) -> dict[str, Any]:
    row = await db.fetchrow("SELECT * FROM ops_runs WHERE id = $1", run_id)
    assert row is not None
    return dict(row)


async def reclaimed(api: AppClient, seeded: SeededQueue) -> uuid.UUID:
    """The issue's setup: claimed (attempt 1), the lease ended, claimed again by the same
    worker (attempt 2)."""
    run_id = await seeded.run()
    [first] = (await api.claim()).json()["runs"]
    assert first["id"] == str(run_id) and first["attempt"] == 1
    await seeded.expire_lease(run_id)
    [second] = (await api.claim()).json()["runs"]
    assert second["id"] == str(run_id) and second["attempt"] == 2
    assert second["claim_owner"] == WORKER_ID
    return run_id


def assert_expired_lease(response: Any) -> None:
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "expired_lease"


@pytest.fixture(params=["fast path", "routes"])
async def door(request: pytest.FixtureRequest, app_factory: Any) -> AppClient:
    """Both doors to the worker endpoints."""
    client: AppClient = await app_factory(worker_fast_path=request.param == "fast path")
    return client


async def test_a_late_close_of_an_earlier_attempt_is_expired_lease_and_changes_nothing(
    door: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    run_id = await reclaimed(door, seeded)
    before = await snapshot(db, run_id)

    late = await door.http.post(
        f"/ops-runs/{run_id}/complete",
        json={"worker_id": WORKER_ID, "result": RESULT, "attempt": 1},
        headers=door.worker_headers(),
    )
    assert_expired_lease(late)
    assert "attempt 1" in late.json()["detail"]
    assert await snapshot(db, run_id) == before

    current = await door.http.post(
        f"/ops-runs/{run_id}/complete",
        json={"worker_id": WORKER_ID, "result": RESULT, "attempt": 2},
        headers=door.worker_headers(),
    )
    assert current.status_code == 200, current.text
    assert current.json()["close_disposition"] == "applied"
    row = await snapshot(db, run_id)
    assert row["state"] == "succeeded" and row["attempt"] == 2
    assert row["result"]["path"] == "briefs/today.md"

    # terminal now: the owner's exact repeat reconciles whatever attempt it names, and a
    # different close from the stale attempt is a terminal conflict
    repeat = await door.http.post(
        f"/ops-runs/{run_id}/complete",
        json={"worker_id": WORKER_ID, "result": RESULT, "attempt": 1},
        headers=door.worker_headers(),
    )
    assert repeat.status_code == 200 and repeat.json()["close_disposition"] == "reconciled"
    different = await door.http.post(
        f"/ops-runs/{run_id}/fail",
        json={"worker_id": WORKER_ID, "error": "late failure", "attempt": 1},
        headers=door.worker_headers(),
    )
    assert different.status_code == 409 and different.json()["code"] == "terminal_conflict"


async def test_a_late_failure_of_an_earlier_attempt_is_expired_lease(
    door: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    run_id = await reclaimed(door, seeded)
    before = await snapshot(db, run_id)
    bodies: tuple[dict[str, Any], ...] = (
        {"error": "llm timeout", "attempt": 1},
        {"error": "llm timeout", "attempt": 1, "reopen": True},  # the locking path
        {"error": "llm timeout", "attempt": 3, "result": RESULT},
    )
    for body in bodies:
        response = await door.fail(run_id, **body)
        assert_expired_lease(response)
    assert await snapshot(db, run_id) == before
    response = await door.fail(run_id, error="llm timeout", attempt=2, reopen=True)
    assert response.status_code == 200 and response.json()["close_disposition"] == "reopened"


async def test_a_heartbeat_of_an_earlier_attempt_is_expired_lease_and_extends_nothing(
    door: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    run_id = await reclaimed(door, seeded)
    before = await snapshot(db, run_id)
    stale = await door.heartbeat(run_id, attempt=1, lease_seconds=3600)
    assert_expired_lease(stale)
    assert await snapshot(db, run_id) == before

    current = await door.heartbeat(run_id, attempt=2, lease_seconds=3600)
    assert current.status_code == 200, current.text
    assert (await snapshot(db, run_id))["lease_until"] > before["lease_until"]
    # without an attempt the heartbeat is not fenced (older workers keep working)
    assert (await door.heartbeat(run_id)).status_code == 200


async def test_the_refusal_order_puts_a_stale_attempt_where_expired_lease_stands(
    api: AppClient, seeded: SeededQueue
) -> None:
    now = datetime.now(UTC)
    open_run = await seeded.run()
    theirs = await seeded.run(
        state="claimed", claim_owner="someone@else", lease_until=now + timedelta(hours=1), attempt=2
    )
    granted = await seeded.run(
        state="claimed",
        claim_owner=WORKER_ID,
        lease_until=now + timedelta(hours=1),
        attempt=2,
        repository_grant=GRANT,
    )
    # open -> state_conflict, another owner -> wrong_owner: both before the attempt
    for run_id, code in ((open_run, "state_conflict"), (theirs, "wrong_owner")):
        for response in (
            await api.http.post(
                f"/ops-runs/{run_id}/complete",
                json={"worker_id": WORKER_ID, "result": RESULT, "attempt": 1},
                headers=api.worker_headers(),
            ),
            await api.heartbeat(run_id, attempt=1),
        ):
            assert response.status_code == 409 and response.json()["code"] == code
    # the stale attempt before the grant evidence (this result carries none)
    stale = await api.http.post(
        f"/ops-runs/{granted}/complete",
        json={"worker_id": WORKER_ID, "result": RESULT, "attempt": 1},
        headers=api.worker_headers(),
    )
    assert_expired_lease(stale)
    current = await api.http.post(
        f"/ops-runs/{granted}/complete",
        json={"worker_id": WORKER_ID, "result": RESULT, "attempt": 2},
        headers=api.worker_headers(),
    )
    assert current.status_code == 409 and current.json()["code"] == "evidence_conflict"


# -- every path of the service ----------------------------------------------------------------


def service(pool: asyncpg.Pool, metrics: QueueMetrics, coalesce_max: int = 32) -> QueueService:
    return QueueService(pool, max_attempts=3, metrics=metrics, coalesce_max=coalesce_max)


async def claimed_at(seeded: SeededQueue, owner: str, attempt: int, **columns: Any) -> uuid.UUID:
    return await seeded.run(
        state="claimed",
        claim_owner=owner,
        lease_until=datetime.now(UTC) + timedelta(hours=1),
        attempt=attempt,
        **columns,
    )


def closes(metrics: QueueMetrics) -> tuple[float, float]:
    labels = {"statement": "close"}
    count = metrics.registry.get_sample_value("ops_run_requests_per_statement_count", labels)
    total = metrics.registry.get_sample_value("ops_run_requests_per_statement_sum", labels)
    return count or 0.0, total or 0.0


@pytest.mark.parametrize("coalesce_max", [1, 32])
async def test_a_close_alone_with_a_stale_attempt_is_refused(
    pool: asyncpg.Pool, seeded: SeededQueue, db: asyncpg.Connection, coalesce_max: int
) -> None:
    """A common close alone: CLOSE_LEASED_UNGRANTED leaves the row, decide_close refuses."""
    metrics = QueueMetrics()
    queue = service(pool, metrics, coalesce_max)
    run_id = await claimed_at(seeded, "w-a", attempt=2)
    before = await snapshot(db, run_id)
    with pytest.raises(QueueRefusal) as refused:
        await queue.complete(run_id, "w-a", RESULT, attempt=1)
    assert refused.value.code is RefusalCode.expired_lease
    with pytest.raises(QueueRefusal) as refused:
        await queue.fail(run_id, "w-a", "boom", reopen=False, raw_result=None, attempt=1)
    assert refused.value.code is RefusalCode.expired_lease
    assert await snapshot(db, run_id) == before
    assert closes(metrics) == (2.0, 2.0)  # each went through the one-statement close first
    _, disposition = await queue.complete(run_id, "w-a", RESULT, attempt=2)
    assert disposition is CloseDisposition.applied


async def test_closes_together_apply_only_the_current_attempts(
    pool: asyncpg.Pool, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    """Common closes that arrive together share CLOSE_MANY_LEASED_UNGRANTED: the stale
    attempts among them are left out and refused on the locking path."""
    metrics = QueueMetrics()
    queue = service(pool, metrics)
    workers = [f"w-{i:02d}" for i in range(8)]
    runs = [await claimed_at(seeded, w, attempt=2) for w in workers]
    before = {r: await snapshot(db, r) for r in runs}
    # even: the current attempt (or none named); odd: a stale one
    named = [2, 1, None, 3, 2, 1, None, 1]
    outcomes = await asyncio.gather(
        *(
            queue.complete(r, w, RESULT, attempt=a)
            if i % 4 < 2
            else queue.fail(r, w, "boom", reopen=False, raw_result=None, attempt=a)
            for i, (r, w, a) in enumerate(zip(runs, workers, named, strict=True))
        ),
        return_exceptions=True,
    )
    count, served = closes(metrics)
    assert served == 8 and count < 8  # they shared statements
    for i, (run_id, outcome) in enumerate(zip(runs, outcomes, strict=True)):
        row = await snapshot(db, run_id)
        if i % 2 == 0:
            assert not isinstance(outcome, BaseException), outcome
            assert outcome[1] is CloseDisposition.applied
            assert row["state"] in {"succeeded", "failed"}
        else:
            assert isinstance(outcome, QueueRefusal), outcome
            assert outcome.code is RefusalCode.expired_lease
            assert row == before[run_id]


async def test_the_shared_close_statement_itself_leaves_stale_attempts(
    db: asyncpg.Connection, seeded: SeededQueue
) -> None:
    """The statements as they run, without the service's fallback behind them."""
    current, stale, unnamed = [await claimed_at(seeded, "w", attempt=2) for _ in range(3)]
    rows = await db.fetch(
        queries.CLOSE_MANY_LEASED_UNGRANTED,
        [current, stale, unnamed],
        ["w", "w", "w"],
        ["succeeded"] * 3,
        [RESULT] * 3,
        [None] * 3,
        ["ci1-a", "ci1-b", "ci1-c"],
        [2, 1, None],
    )
    assert {r["id"] for r in rows} == {current, unnamed}
    assert (await snapshot(db, stale))["state"] == "claimed"

    alone = await claimed_at(seeded, "w", attempt=2)
    args = (alone, "w", "succeeded", RESULT, None, "ci1-d")
    assert await db.fetchrow(queries.CLOSE_LEASED_UNGRANTED, *args, 1) is None
    assert (await snapshot(db, alone))["state"] == "claimed"
    applied = await db.fetchrow(queries.CLOSE_LEASED_UNGRANTED, *args, 2)
    assert applied is not None and applied["state"] == "succeeded"


async def test_the_locking_path_refuses_a_stale_attempt(
    pool: asyncpg.Pool, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    """Closes the one statement cannot take (a reopening failure; a run with a grant) go
    straight to the locking transaction, which refuses a stale attempt."""
    queue = service(pool, QueueMetrics())
    reopening = await claimed_at(seeded, "w-a", attempt=2)
    granted = await claimed_at(seeded, "w-a", attempt=2, repository_grant=GRANT)
    before = {r: await snapshot(db, r) for r in (reopening, granted)}
    with pytest.raises(QueueRefusal) as refused:
        await queue.fail(reopening, "w-a", "flaky", reopen=True, raw_result=None, attempt=1)
    assert refused.value.code is RefusalCode.expired_lease
    with pytest.raises(QueueRefusal) as refused:
        await queue.complete(granted, "w-a", RESULT, attempt=1)
    assert refused.value.code is RefusalCode.expired_lease
    with pytest.raises(QueueRefusal) as refused:
        await queue.heartbeat(granted, "w-a", 600, attempt=1)
    assert refused.value.code is RefusalCode.expired_lease
    assert {r: await snapshot(db, r) for r in (reopening, granted)} == before


async def test_openapi_documents_the_attempt_of_heartbeat_complete_and_fail(
    api: AppClient,
) -> None:
    document = (await api.http.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    for name in ("HeartbeatRequest", "CompleteRequest", "FailRequest"):
        attempt = schemas[name]["properties"]["attempt"]
        assert {"type": "integer", "minimum": 1, "maximum": 2**31 - 1} in attempt["anyOf"]
        assert "expired_lease" in attempt["description"], name
        assert "attempt" not in schemas[name].get("required", [])
    for action in ("heartbeat", "complete", "fail"):
        conflict = document["paths"][f"/ops-runs/{{run_id}}/{action}"]["post"]["responses"]["409"]
        assert "attempt" in conflict["description"], action
