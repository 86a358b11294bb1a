"""Requeue: a failed or expired run gets a new open successor; the original never changes.

Against the real PostgreSQL: every answer, every refusal (and that it changes no row),
the idempotent repeat, the race of two requeues with one key, the bulk form, and a
successor that is claimed, closed and requeued like any run.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from ac_testkit import WORKER_ID, AppClient, SeededQueue, refusal_of, run_rows

GRANT = {
    "version": "1",
    "allowed_paths": ["docs/"],
    "commit_count": {"min": 1, "max": 1},
    "publish": False,
}
# every column the successor copies from its original
COPIED = (
    "activity_definition_id",
    "target_repo",
    "title",
    "description",
    "labels",
    "priority",
    "source_type",
    "source_id",
    "triggering_event_id",
    "approach_hint",
    "harness_profile_ref",
    "execution_refs",
    "repository_grant",
)


async def failed_run(seeded: SeededQueue, **columns: Any) -> uuid.UUID:
    values: dict[str, Any] = {
        "state": "failed",
        "claim_owner": WORKER_ID,
        "attempt": 3,
        "last_error": "llm timeout",
        "close_intent_digest": "ci1-recorded",
        "result": {"ok": False},
        "labels": ["automated", "brief"],
        "priority": "high",
        "approach_hint": "legacy-hint",
        "execution_refs": {"correlation_id": "corr-7"},
        "repository_grant": GRANT,
    }
    values.update(columns)
    return await seeded.run(**values)


async def requeue(api: AppClient, run_id: Any, key: str | None = None, **headers: str) -> Any:
    sent = {**api.operator_headers(), **headers}
    if key is not None:
        sent["Idempotency-Key"] = key
    return await api.http.post(f"/ops-runs/{run_id}/requeue", headers=sent)


async def test_a_failed_run_gets_an_open_successor_and_the_original_never_changes(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    original = await failed_run(seeded)
    before = await seeded.row(original)

    response = await requeue(api, original, "ticket-42")
    assert response.status_code == 201, response.text
    successor = response.json()
    assert successor["state"] == "open"
    assert successor["attempt"] == 0
    assert successor["requeued_from"] == str(original)
    assert successor["requeued_as"] == []
    assert successor["idempotency_key"] == f"requeue/{original}/ticket-42"
    assert successor["claim_owner"] is None and successor["lease_until"] is None
    assert successor["result"] is None and successor["last_error"] is None
    assert successor["cancelled_by"] is None
    assert response.headers["X-Request-Id"]

    stored = await seeded.row(uuid.UUID(successor["id"]))
    for column in COPIED:
        assert stored[column] == before[column], column
    # the original row: not one column written, its close digest intact
    assert dict(await seeded.row(original)) == dict(before)

    # both link to each other in every projection
    got = (await api.http.get(f"/ops-runs/{original}", headers=api.operator_headers())).json()
    assert got["requeued_as"] == [successor["id"]]
    assert got["requeued_from"] is None
    got = (
        await api.http.get(f"/ops-runs/{successor['id']}", headers=api.operator_headers())
    ).json()
    assert got["requeued_from"] == str(original)
    listed = (await api.http.get("/ops-runs", headers=api.operator_headers())).json()["runs"]
    by_id = {run["id"]: run for run in listed}
    assert by_id[str(original)]["requeued_as"] == [successor["id"]]
    assert by_id[successor["id"]]["requeued_from"] == str(original)


async def test_the_same_key_again_answers_the_same_successor_and_another_key_a_new_one(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    original = await failed_run(seeded)
    first = await requeue(api, original, "k-1")
    assert first.status_code == 201
    again = await requeue(api, original, "k-1")
    assert again.status_code == 200, again.text
    assert again.json() == first.json()

    other = await requeue(api, original, "k-2")
    assert other.status_code == 201
    assert other.json()["id"] != first.json()["id"]

    # no key: the run itself is the key, so a repeat is the same successor too
    keyless = await requeue(api, original)
    assert keyless.status_code == 201
    assert keyless.json()["idempotency_key"] == f"requeue/{original}"
    keyless_again = await requeue(api, original)
    assert keyless_again.status_code == 200
    assert keyless_again.json()["id"] == keyless.json()["id"]

    successors = await db.fetch(
        "SELECT id FROM ops_runs WHERE requeued_from = $1 ORDER BY created_at, id", original
    )
    assert len(successors) == 3
    got = (await api.http.get(f"/ops-runs/{original}", headers=api.operator_headers())).json()
    assert got["requeued_as"] == [str(r["id"]) for r in successors]


async def test_an_expired_run_is_requeued(api: AppClient, seeded: SeededQueue) -> None:
    original = await seeded.run(state="expired", claim_owner=WORKER_ID, attempt=3)
    response = await requeue(api, original, "after-expiry")
    assert response.status_code == 201, response.text
    assert response.json()["requeued_from"] == str(original)


@pytest.mark.parametrize(
    ("columns", "said"),
    [
        ({}, "it is open"),
        (
            {
                "state": "claimed",
                "claim_owner": WORKER_ID,
                "lease_until": datetime.now(UTC) + timedelta(hours=1),
                "attempt": 1,
            },
            "it is claimed",
        ),
        ({"state": "succeeded", "claim_owner": WORKER_ID, "attempt": 1}, "it succeeded"),
    ],
)
async def test_a_run_that_is_not_failed_or_expired_is_a_state_conflict_that_says_why(
    api: AppClient,
    seeded: SeededQueue,
    db: asyncpg.Connection,
    columns: dict[str, Any],
    said: str,
) -> None:
    run = await seeded.run(**columns)
    before = await run_rows(db)
    response = await requeue(api, run, "k")
    assert said in refusal_of(response, 409, "state_conflict")["detail"]
    assert response.headers["X-Request-Id"]
    assert await run_rows(db) == before


async def test_an_unknown_run_is_not_found_and_a_bad_key_is_invalid(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    original = await failed_run(seeded)
    before = await run_rows(db)
    missing = await requeue(api, uuid.uuid4(), "k")
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    for bad in ("has space", "x" * 129, "", "semi;colon", "slash/key"):
        response = await requeue(api, original, bad)
        assert response.status_code == 422, (bad, response.text)
        body = response.json()
        assert body["code"] == "invalid_request"
        assert body["errors"][0]["loc"] == ["header", "Idempotency-Key"], body
    not_a_uuid = await requeue(api, "not-a-uuid", "k")
    assert not_a_uuid.status_code == 422
    assert await run_rows(db) == before


async def test_two_requeues_with_one_key_make_one_successor(
    app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    replicas = [await app_factory() for _ in range(2)]
    for attempt in range(10):
        original = await failed_run(seeded)
        # two replicas, each with its own pool: the requests race in the database
        answers = await asyncio.gather(
            *(requeue(replicas[n % 2], original, f"race-{attempt}") for n in range(8))
        )
        assert sorted(a.status_code for a in answers) == [200] * 7 + [201], [
            a.text for a in answers
        ]
        assert len({a.json()["id"] for a in answers}) == 1
        count = await db.fetchval(
            "SELECT count(*) FROM ops_runs WHERE requeued_from = $1", original
        )
        assert count == 1


async def test_two_concurrent_inserts_of_one_key_wait_and_the_second_finds_the_first(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    """The statement level of the race: the second requeue's insert waits on the unique
    key for the first transaction, then inserts nothing and reads the first's row."""
    from activity_core.operator import queries
    from activity_core.operator.decisions import successor_key

    original = await failed_run(seeded)
    key = successor_key(original, "held")
    async with pool.acquire() as first, pool.acquire() as second:
        tx = first.transaction()
        await tx.start()
        made = await first.fetchrow(queries.REQUEUE, original, uuid.uuid4(), key)
        assert made is not None
        async with second.transaction():
            waiting = asyncio.create_task(
                second.fetchrow(queries.REQUEUE, original, uuid.uuid4(), key)
            )
            await asyncio.sleep(0.3)
            assert not waiting.done()  # held by the first transaction's key
            await tx.commit()
            assert await waiting is None
            found = await second.fetchrow(queries.RUN_BY_KEY, key)
            assert found is not None and found["id"] == made["id"]


async def test_a_successor_is_claimed_closed_and_requeued_like_any_run(
    api: AppClient, seeded: SeededQueue
) -> None:
    original = await failed_run(seeded, repository_grant=None, labels=["automated"])
    first = (await requeue(api, original, "one")).json()
    claimed = await api.claim(labels=["automated"])
    assert [run["id"] for run in claimed.json()["runs"]] == [first["id"]]
    assert claimed.json()["runs"][0]["requeued_from"] == str(original)
    failed = await api.fail(first["id"], error="again", attempt=1)
    assert failed.status_code == 200, failed.text
    assert failed.json()["state"] == "failed"
    assert failed.json()["requeued_from"] == str(original)

    second = await requeue(api, first["id"], "two")
    assert second.status_code == 201
    assert second.json()["requeued_from"] == first["id"]
    got = (await api.http.get(f"/ops-runs/{first['id']}", headers=api.operator_headers())).json()
    assert got["requeued_from"] == str(original)
    assert got["requeued_as"] == [second.json()["id"]]

    # a reconciled repeat of the failed successor's close names its own successor as well
    repeat = await api.fail(first["id"], error="again", attempt=1)
    assert repeat.json()["close_disposition"] == "reconciled"
    assert repeat.json()["requeued_as"] == [second.json()["id"]]


async def test_bulk_requeue_answers_each_run_on_its_own(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    failed = await failed_run(seeded)
    expired = await seeded.run(state="expired", claim_owner=WORKER_ID, attempt=3)
    open_run = await seeded.run()
    succeeded = await seeded.run(state="succeeded", claim_owner=WORKER_ID, attempt=1)
    missing = uuid.uuid4()
    ids = [failed, expired, open_run, missing, succeeded]
    headers = {**api.operator_headers(), "Idempotency-Key": "bulk-1"}

    response = await api.http.post(
        "/ops-runs/requeue", json={"run_ids": [str(i) for i in ids]}, headers=headers
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(r["run_id"], r["status"], r.get("code")) for r in results] == [
        (str(failed), 201, None),
        (str(expired), 201, None),
        (str(open_run), 409, "state_conflict"),
        (str(missing), 404, "not_found"),
        (str(succeeded), 409, "state_conflict"),
    ]
    assert results[0]["successor"]["requeued_from"] == str(failed)
    assert all(r["detail"] for r in results[2:])

    again = await api.http.post(
        "/ops-runs/requeue", json={"run_ids": [str(failed), str(expired)]}, headers=headers
    )
    assert [r["status"] for r in again.json()["results"]] == [200, 200]
    assert [r["successor"]["id"] for r in again.json()["results"]] == [
        r["successor"]["id"] for r in results[:2]
    ]
    assert await db.fetchval("SELECT count(*) FROM ops_runs WHERE requeued_from IS NOT NULL") == 2


@pytest.mark.parametrize(
    "body",
    [
        {"run_ids": []},
        {"run_ids": [str(uuid.uuid4()) for _ in range(101)]},
        {"run_ids": ["not-a-uuid"]},
        {"run_ids": [str(uuid.UUID(int=1))] * 2},
        {"run_ids": [str(uuid.uuid4())], "surprise": 1},
        {},
    ],
)
async def test_a_bad_bulk_body_is_invalid_request(
    api: AppClient, db: asyncpg.Connection, body: dict[str, Any]
) -> None:
    before = await run_rows(db)
    response = await api.http.post("/ops-runs/requeue", json=body, headers=api.operator_headers())
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_request"
    assert response.json()["errors"]
    assert await run_rows(db) == before


async def test_every_requeue_and_refusal_is_in_the_audit_trail(
    api: AppClient, seeded: SeededQueue
) -> None:
    original = await failed_run(seeded)
    open_run = await seeded.run()
    created = await requeue(api, original, "a1", **{"X-Request-Id": "req-1"})
    await requeue(api, original, "a1", **{"X-Request-Id": "req-2"})
    refused = await requeue(api, open_run, "a1", **{"X-Request-Id": "req-3"})
    assert [created.headers["X-Request-Id"], refused.headers["X-Request-Id"]] == [
        "req-1",
        "req-3",
    ]

    page = await api.http.get(
        "/ops/audit", params={"run_id": str(original)}, headers=api.operator_headers()
    )
    entries = page.json()["entries"]
    assert [(e["actor"], e["action"], e["outcome"], e["request_id"]) for e in entries] == [
        ("operator", "requeue", "repeated", "req-2"),
        ("operator", "requeue", "applied", "req-1"),
    ]
    assert entries[1]["details"] == {
        "successor": created.json()["id"],
        "idempotency_key": "a1",
    }
    refusal = (
        await api.http.get(
            "/ops/audit", params={"target": f"ops_run:{open_run}"}, headers=api.operator_headers()
        )
    ).json()["entries"]
    assert [(e["outcome"], e["code"], e["request_id"]) for e in refusal] == [
        ("refused", "state_conflict", "req-3")
    ]
    assert "it is open" in refusal[0]["detail"]
