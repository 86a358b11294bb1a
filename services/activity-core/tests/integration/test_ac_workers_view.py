"""The workers view: each identity's last claim, recorded off the claim path, and the
runs it holds; and the states alive, idle, gone."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from ac_testkit import WORKER_ID, AppClient, SeededQueue
from activity_core.db.pool import create_pool
from activity_core.queue import queries
from activity_core.queue.claim import ClaimSpec
from activity_core.queue.sightings import FLUSH_SECONDS, ClaimSightings
from ops_contracts import LabelsMode


def spec(worker_id: str, labels: list[str] | None = None, **kwargs: Any) -> ClaimSpec:
    values: dict[str, Any] = {
        "worker_id": worker_id,
        "labels": labels,
        "labels_mode": LabelsMode.any,
        "limit": 1,
        "lease_seconds": 600,
        "wait_seconds": 0,
    }
    values.update(kwargs)
    return ClaimSpec(**values)


async def workers(api: AppClient) -> dict[str, dict[str, Any]]:
    response = await api.http.get("/ops/workers", headers=api.operator_headers())
    assert response.status_code == 200, response.text
    return {w["worker_id"]: w for w in response.json()["workers"]}


async def test_a_claim_is_seen_at_once_and_written_only_by_the_flush(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    held = await seeded.run(labels=["automated", "brief"])
    response = await api.claim(labels=["brief", "report"], labels_mode="all", limit=3)
    assert [run["id"] for run in response.json()["runs"]] == []  # "all": the run lacks "report"
    response = await api.claim(labels=["brief", "report"], labels_mode="any", limit=3)
    assert [run["id"] for run in response.json()["runs"]] == [str(held)]

    # the claim wrote nothing of it: the view shows this process's sightings
    assert await db.fetchval("SELECT count(*) FROM ops_workers") == 0
    seen = await workers(api)
    assert seen[WORKER_ID]["labels"] == ["brief", "report"]
    assert seen[WORKER_ID]["labels_mode"] == "any"
    assert seen[WORKER_ID]["limit"] == 3
    assert seen[WORKER_ID]["holding"] == [str(held)]
    assert seen[WORKER_ID]["state"] == "alive"

    sightings: ClaimSightings = api.app.state.sightings
    assert await sightings.flush() == 1
    row = await db.fetchrow("SELECT * FROM ops_workers WHERE worker_id = $1", WORKER_ID)
    assert row is not None
    assert (row["labels"], row["labels_mode"], row["claim_limit"]) == (
        ["brief", "report"],
        "any",
        3,
    )
    assert abs(row["last_claim_at"] - datetime.now(UTC)) < timedelta(seconds=30)
    assert await sightings.flush() == 0  # nothing new since


async def test_many_identities_are_written_in_one_statement_by_the_background_task(
    api: AppClient, db: asyncpg.Connection
) -> None:
    queue = api.app.state.queue
    for n in range(5):
        await queue.claim(spec(f"fleet-{n}", ["automated"] if n % 2 else None, limit=1 + n))
    deadline = time.monotonic() + FLUSH_SECONDS * 3
    while await db.fetchval("SELECT count(*) FROM ops_workers") < 5:
        assert time.monotonic() < deadline, "the background task wrote no sightings"
        await asyncio.sleep(0.1)
    rows = {r["worker_id"]: r for r in await db.fetch("SELECT * FROM ops_workers")}
    assert rows["fleet-0"]["labels"] is None
    assert rows["fleet-1"]["labels"] == ["automated"]
    assert rows["fleet-4"]["claim_limit"] == 5


async def test_another_replica_sees_the_claims_once_written(
    app_factory: Any, db: asyncpg.Connection
) -> None:
    first, second = await app_factory(), await app_factory()
    await first.app.state.queue.claim(spec("seen-by-first", ["x"]))
    assert "seen-by-first" not in await workers(second)
    await first.app.state.sightings.flush()
    assert (await workers(second))["seen-by-first"]["labels"] == ["x"]


async def test_the_later_claim_wins_whatever_order_the_replicas_write_in(
    db: asyncpg.Connection,
) -> None:
    now = datetime.now(UTC)

    async def write(at: datetime, labels: list[str]) -> None:
        await db.execute(queries.RECORD_SIGHTINGS, ["w"], [at], [json.dumps(labels)], ["any"], [1])

    await write(now, ["newer"])
    await write(now - timedelta(seconds=5), ["older"])  # a replica that wrote late
    assert await db.fetchval("SELECT labels FROM ops_workers WHERE worker_id = 'w'") == ["newer"]
    await write(now + timedelta(seconds=1), ["newest"])
    assert await db.fetchval("SELECT labels FROM ops_workers WHERE worker_id = 'w'") == ["newest"]


async def test_a_failed_write_keeps_the_sightings_for_the_next_one(db_dsn: str) -> None:
    unreachable = await create_pool("postgresql://nobody@127.0.0.1:1/none", min_size=0, max_size=1)
    try:
        sightings = ClaimSightings(unreachable)
        sightings.record("w-1", ["a"], "any", 1)
        try:
            await sightings.flush()
        except OSError:
            pass
        else:
            raise AssertionError("a flush to an unreachable database succeeded")
        assert set(sightings.pending()) == {"w-1"}
    finally:
        await unreachable.close()
    pool = await create_pool(db_dsn, min_size=1, max_size=1)
    try:
        kept = ClaimSightings(pool)
        kept.record("w-1", ["a"], "any", 1)
        assert await kept.flush() == 1
    finally:
        await pool.close()


async def test_states_follow_the_last_claim_and_the_leases_held(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    now = datetime.now(UTC)
    for worker_id, age in (("recent", 10), ("stopped", 300), ("long-gone", 7200), ("busy", 7200)):
        await db.execute(
            queries.RECORD_SIGHTINGS,
            [worker_id],
            [now - timedelta(seconds=age)],
            [None],
            ["any"],
            [1],
        )
    live = await seeded.run(
        state="claimed", claim_owner="busy", lease_until=now + timedelta(minutes=5), attempt=1
    )
    stale = await seeded.run(
        state="claimed", claim_owner="crashed", lease_until=now - timedelta(minutes=5), attempt=1
    )
    seen = await workers(api)
    assert {w: seen[w]["state"] for w in seen} == {
        "recent": "alive",
        "stopped": "idle",
        "long-gone": "gone",
        "busy": "alive",  # not claiming, but its lease is live: it works on a run
        "crashed": "gone",  # no claim recorded, and the lease it holds has ended
    }
    assert seen["busy"]["holding"] == [str(live)]
    assert seen["crashed"]["holding"] == [str(stale)]
    assert seen["crashed"]["last_claim_at"] is None
    # latest claim first, identities without a recorded claim last
    assert list(seen)[:2] == ["recent", "stopped"]
    assert list(seen)[-1] == "crashed"


async def test_a_viewer_reads_the_workers_and_a_worker_token_does_not(api: AppClient) -> None:
    refused = await api.http.get("/ops/workers", headers=api.worker_headers())
    assert refused.status_code == 403
    assert refused.json()["code"] == "forbidden"
    anonymous = await api.http.get("/ops/workers")
    assert anonymous.status_code == 401
