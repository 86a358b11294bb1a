"""Cancel: an open or claimed run is failed by an operator; the worker learns it.

Against the real PostgreSQL: the answer and the row, every refusal (changing nothing),
what the worker holding it is answered afterwards, and a cancel racing a complete or a
fail: exactly one of them changes the run, the other gets its documented refusal.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from ac_testkit import WORKER_ID, AppClient, SeededQueue, refusal_of, run_rows

REASON = "stuck on a bad deploy; INC-7"


async def claimed_run(seeded: SeededQueue, **columns: Any) -> uuid.UUID:
    values: dict[str, Any] = {
        "state": "claimed",
        "claim_owner": WORKER_ID,
        "lease_until": datetime.now(UTC) + timedelta(hours=1),
        "attempt": 2,
    }
    values.update(columns)
    return await seeded.run(**values)


async def cancel(api: AppClient, run_id: Any, reason: Any = REASON) -> httpx.Response:
    return await api.http.post(
        f"/ops-runs/{run_id}/cancel", json={"reason": reason}, headers=api.operator_headers()
    )


async def test_a_claimed_run_is_failed_its_lease_and_owner_cleared_and_the_worker_refused(
    api: AppClient, seeded: SeededQueue
) -> None:
    run = await claimed_run(seeded)
    response = await cancel(api, run)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "failed"
    assert body["close_disposition"] == "applied"
    assert body["claim_owner"] is None and body["lease_until"] is None
    assert body["attempt"] == 2
    assert body["cancelled_by"] == "operator"
    assert body["last_error"] == (
        f"cancelled by operator operator while {WORKER_ID} held attempt 2: {REASON}"
    )
    assert response.headers["X-Request-Id"]
    row = await seeded.row(run)
    assert (row["state"], row["claim_owner"], row["lease_until"]) == ("failed", None, None)
    assert row["close_intent_digest"] is None

    # the worker that held it: its next heartbeat is refused (the LeaseKeeper's "lost"),
    # and any close of it is a terminal conflict
    heartbeat = await api.heartbeat(run, attempt=2)
    assert heartbeat.status_code == 409
    assert heartbeat.json() == {
        "code": "state_conflict",
        "detail": "the run was cancelled by operator operator",
    }
    for close in (
        await api.complete(run, {"ok": True}),
        await api.fail(run, error="boom"),
        await api.fail(run, error="boom", reopen=True),
    ):
        assert close.status_code == 409, close.text
        assert close.json()["code"] == "terminal_conflict"
        assert "cancelled by operator operator" in close.json()["detail"]
    assert dict(await seeded.row(run)) == dict(row)


async def test_an_open_run_is_cancelled_and_no_claim_takes_it(
    api: AppClient, seeded: SeededQueue
) -> None:
    run = await seeded.run(labels=["automated"])
    response = await cancel(api, run, "not needed this week")
    assert response.status_code == 200, response.text
    assert response.json()["last_error"] == (
        "cancelled by operator operator while it was open: not needed this week"
    )
    assert response.json()["attempt"] == 0
    claim = await api.claim(labels=["automated"])
    assert claim.json()["runs"] == []


@pytest.mark.parametrize(
    ("columns", "said"),
    [
        ({"state": "succeeded", "claim_owner": WORKER_ID, "attempt": 1}, "already succeeded"),
        ({"state": "failed", "claim_owner": WORKER_ID, "attempt": 1}, "already failed"),
        ({"state": "expired", "claim_owner": WORKER_ID, "attempt": 3}, "already expired"),
    ],
)
async def test_a_terminal_run_is_a_state_conflict_and_nothing_changes(
    api: AppClient,
    seeded: SeededQueue,
    db: asyncpg.Connection,
    columns: dict[str, Any],
    said: str,
) -> None:
    run = await seeded.run(**columns)
    before = await run_rows(db)
    response = await cancel(api, run)
    assert said in refusal_of(response, 409, "state_conflict")["detail"]
    assert await run_rows(db) == before


async def test_a_second_cancel_says_who_cancelled_it(api: AppClient, seeded: SeededQueue) -> None:
    run = await seeded.run()
    assert (await cancel(api, run)).status_code == 200
    again = await cancel(api, run)
    assert again.status_code == 409
    assert again.json() == {
        "code": "state_conflict",
        "detail": "the run was cancelled already, by operator operator",
    }


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": "x" * 1001},
        {"reason": 7},
        {"reason": "ok", "force": True},
    ],
)
async def test_a_bad_body_or_run_is_refused_and_nothing_changes(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, body: dict[str, Any]
) -> None:
    run = await claimed_run(seeded)
    before = await run_rows(db)
    response = await api.http.post(
        f"/ops-runs/{run}/cancel", json=body, headers=api.operator_headers()
    )
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_request"
    assert response.json()["errors"]
    missing = await cancel(api, uuid.uuid4())
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    assert await run_rows(db) == before


# Nothing of these is left once the reason is sanitized (ops_evidence.sanitize_error):
# controls, format characters (category Cf: zero-width, word joiner, bidi), separators
# and whitespace.
NOTHING_VISIBLE = ["\x00", "\u200b\u200b", "   ", "\u2060", "\x00\t\u200d\u2028\u202e\ufeff "]


@pytest.mark.parametrize("reason", NOTHING_VISIBLE)
async def test_a_reason_with_nothing_visible_is_refused_and_nothing_changes(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, reason: str
) -> None:
    run = await claimed_run(seeded)
    before = await run_rows(db)
    audited = await db.fetchval("SELECT count(*) FROM ops_audit")
    response = await cancel(api, run, reason)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_request"
    assert "reason" in response.text
    assert await run_rows(db) == before
    assert await db.fetchval("SELECT count(*) FROM ops_audit") == audited
    # one visible character among them is a reason
    assert (await cancel(api, run, f"{reason}x{reason}")).status_code == 200
    stored = (await seeded.row(run))["last_error"]
    assert stored.isprintable() and stored.rpartition(":")[2].strip() == "x", stored


async def test_the_reason_is_sanitized_and_bounded_like_every_stored_error(
    api: AppClient, seeded: SeededQueue
) -> None:
    run = await seeded.run()
    reason = "line one\nline two\u202e reversed\u200b" + "y" * 950
    response = await cancel(api, run, reason)
    assert response.status_code == 200, response.text
    stored = (await seeded.row(run))["last_error"]
    assert "\n" not in stored and "\u202e" not in stored and "\u200b" not in stored
    assert "line one line two  reversed" in stored
    assert len(stored) <= 2048
    assert response.json()["last_error"] == stored


async def test_a_complete_that_comes_first_wins_and_the_cancel_is_a_state_conflict(
    api: AppClient, seeded: SeededQueue
) -> None:
    run = await claimed_run(seeded)
    assert (await api.complete(run, {"ok": True})).status_code == 200
    response = await cancel(api, run)
    assert response.status_code == 409
    assert response.json() == {
        "code": "state_conflict",
        "detail": "the run is already succeeded: only open or claimed runs are cancelled",
    }
    assert (await seeded.row(run))["state"] == "succeeded"


@pytest.mark.parametrize("close", ["complete", "fail", "fail-reopen", "heartbeat"])
@pytest.mark.parametrize("first", ["cancel", "close"])
async def test_a_cancel_and_a_close_queued_on_one_row_lock_change_the_run_once(
    api: AppClient, seeded: SeededQueue, db_dsn: str, close: str, first: str
) -> None:
    """Both wait on a lock another transaction holds; the one queued first gets the row,
    the other then finds it changed and is refused as documented."""
    run = await claimed_run(seeded)

    async def do_close() -> httpx.Response:
        if close == "complete":
            return await api.complete(run, {"ok": True})
        if close == "heartbeat":
            return await api.heartbeat(run, attempt=2)
        return await api.fail(run, error="boom", reopen=close == "fail-reopen")

    holder = await asyncpg.connect(db_dsn)
    observer = await asyncpg.connect(db_dsn)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM ops_runs WHERE id = $1 FOR NO KEY UPDATE", run)
        calls = {"cancel": lambda: cancel(api, run), "close": do_close}
        order = [first, "close" if first == "cancel" else "cancel"]
        tasks = {}
        for name in order:
            tasks[name] = asyncio.create_task(calls[name]())
            await _waiting_on_a_lock(observer, len(tasks))
        await tx.rollback()
        answers = {name: await task for name, task in tasks.items()}
    finally:
        await holder.close()
        await observer.close()

    row = await seeded.row(run)
    if first == "cancel":
        assert answers["cancel"].status_code == 200, answers["cancel"].text
        refused = answers["close"]
        assert refused.status_code == 409, refused.text
        expected = "state_conflict" if close == "heartbeat" else "terminal_conflict"
        assert refused.json()["code"] == expected
        assert (row["state"], row["cancelled_by"]) == ("failed", "operator")
    else:
        assert answers["close"].status_code == 200, answers["close"].text
        if close == "heartbeat":
            # a heartbeat only extends the lease: the cancel after it still applies
            assert answers["cancel"].status_code == 200
            assert row["state"] == "failed"
        elif close == "fail-reopen":
            # reopened below the ceiling: the run is open, and the cancel then fails it
            assert answers["cancel"].status_code == 200
            assert (row["state"], row["cancelled_by"]) == ("failed", "operator")
        else:
            assert answers["cancel"].status_code == 409
            assert answers["cancel"].json()["code"] == "state_conflict"
            assert row["cancelled_by"] is None
            assert row["state"] == ("succeeded" if close == "complete" else "failed")


async def _waiting_on_a_lock(observer: asyncpg.Connection, count: int) -> None:
    """Until `count` backends wait on a lock (the requests queued behind the holder). The
    observer is outside any transaction: pg_stat_activity is read once per transaction."""
    for _ in range(500):
        waiting = await observer.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        if waiting >= count:
            return
        await asyncio.sleep(0.01)
    seen = await observer.fetch(
        "SELECT state, wait_event_type, wait_event, query FROM pg_stat_activity "
        "WHERE datname = current_database()"
    )
    raise AssertionError(f"{count} requests never waited on the row lock: {seen}")


async def test_cancels_racing_completes_on_two_replicas_change_each_run_once(
    app_factory: Any, seeded: SeededQueue
) -> None:
    replicas = [await app_factory() for _ in range(2)]
    runs = [await claimed_run(seeded) for _ in range(30)]

    async def race(n: int, run: uuid.UUID) -> tuple[httpx.Response, httpx.Response]:
        closer, canceller = replicas[n % 2], replicas[(n + 1) % 2]
        done, cancelled = await asyncio.gather(
            closer.complete(run, {"ok": True}), cancel(canceller, run)
        )
        return done, cancelled

    results = await asyncio.gather(*(race(n, run) for n, run in enumerate(runs)))
    for run, (done, cancelled) in zip(runs, results, strict=True):
        row = await seeded.row(run)
        statuses = (done.status_code, cancelled.status_code)
        assert statuses in {(200, 409), (409, 200)}, (done.text, cancelled.text)
        if done.status_code == 200:
            assert cancelled.json()["code"] == "state_conflict"
            assert row["state"] == "succeeded" and row["cancelled_by"] is None
        else:
            assert done.json()["code"] == "terminal_conflict"
            assert row["state"] == "failed" and row["cancelled_by"] == "operator"


async def test_every_cancel_and_refusal_is_in_the_audit_trail(
    api: AppClient, seeded: SeededQueue
) -> None:
    run = await claimed_run(seeded)
    await cancel(api, run)
    await cancel(api, run)
    entries = (
        await api.http.get(
            "/ops/audit", params={"run_id": str(run)}, headers=api.operator_headers()
        )
    ).json()["entries"]
    assert [(e["action"], e["outcome"], e["code"]) for e in entries] == [
        ("cancel", "refused", "state_conflict"),
        ("cancel", "applied", None),
    ]
    assert entries[1]["details"] == {
        "reason": REASON,
        "state": "claimed",
        "holder": WORKER_ID,
        "attempt": 2,
    }
