"""Claim semantics of the spec: order, labels, limit, leases, stale reclaim, ceiling."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from ac_testkit import WORKER_ID, AppClient, SeededQueue


async def test_claim_on_an_empty_queue_answers_no_runs(api: AppClient) -> None:
    response = await api.claim()
    assert response.status_code == 200
    assert response.json() == {"runs": []}


async def test_claim_leases_one_run_and_increments_attempt(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run()
    before = datetime.now().astimezone()
    response = await api.claim(lease_seconds=120)
    assert response.status_code == 200
    [run] = response.json()["runs"]
    assert run["id"] == str(run_id)
    assert run["state"] == "claimed"
    assert run["claim_owner"] == WORKER_ID
    assert run["attempt"] == 1
    assert "close_intent_digest" not in run
    lease_until = datetime.fromisoformat(run["lease_until"])
    assert before + timedelta(seconds=100) < lease_until < before + timedelta(seconds=140)
    row = await seeded.row(run_id)
    assert (row["state"], row["claim_owner"], row["attempt"]) == ("claimed", WORKER_ID, 1)


async def test_default_lease_comes_from_settings(app_factory: Any, seeded: SeededQueue) -> None:
    api = await app_factory(OPS_RUN_LEASE_SECONDS=42)
    await seeded.run()
    [run] = (await api.claim()).json()["runs"]
    remaining = datetime.fromisoformat(run["lease_until"]) - datetime.now().astimezone()
    assert timedelta(seconds=30) < remaining <= timedelta(seconds=42)


async def test_claim_order_is_priority_then_oldest(api: AppClient, seeded: SeededQueue) -> None:
    now = datetime.now().astimezone()
    low_old = await seeded.run(priority="low", created_at=now - timedelta(hours=5))
    medium_new = await seeded.run(priority="medium", created_at=now - timedelta(hours=1))
    high_new = await seeded.run(priority="high", created_at=now - timedelta(minutes=1))
    medium_old = await seeded.run(priority="medium", created_at=now - timedelta(hours=3))
    high_old = await seeded.run(priority="high", created_at=now - timedelta(hours=2))
    response = await api.claim(limit=100)
    order = [run["id"] for run in response.json()["runs"]]
    expected = [high_old, high_new, medium_old, medium_new, low_old]
    assert order == [str(r) for r in expected]


async def test_limit_bounds_the_batch(api: AppClient, seeded: SeededQueue) -> None:
    await seeded.runs(5)
    assert len((await api.claim(limit=3)).json()["runs"]) == 3
    assert len((await api.claim(limit=3)).json()["runs"]) == 2
    assert (await api.claim(limit=3)).json()["runs"] == []


async def test_labels_any_all_and_omitted(api: AppClient, seeded: SeededQueue) -> None:
    a = await seeded.run(labels=["automated", "research-brief"])
    b = await seeded.run(labels=["automated"])
    c = await seeded.run(labels=["maintenance"])

    async def ids(**body: Any) -> set[str]:
        runs = (await api.claim(limit=100, **body)).json()["runs"]
        for run in runs:  # put them back so every query sees the same queue
            await seeded.conn.execute(
                "UPDATE ops_runs SET state='open', claim_owner=NULL, lease_until=NULL, attempt=0 "
                "WHERE id = $1",
                uuid.UUID(run["id"]),
            )
        return {run["id"] for run in runs}

    assert await ids(labels=["research-brief", "maintenance"]) == {str(a), str(c)}
    assert await ids(labels=["research-brief", "maintenance"], labels_mode="any") == {
        str(a),
        str(c),
    }
    assert await ids(labels=["automated", "research-brief"], labels_mode="all") == {str(a)}
    assert await ids(labels=["automated"], labels_mode="all") == {str(a), str(b)}
    assert await ids(labels=["nothing-has-this"]) == set()
    assert await ids() == {str(a), str(b), str(c)}


async def test_claimed_rows_are_not_claimed_again(api: AppClient, seeded: SeededQueue) -> None:
    await seeded.run()
    assert len((await api.claim()).json()["runs"]) == 1
    assert (await api.claim(worker_id=WORKER_ID)).json()["runs"] == []


async def test_stale_claim_is_reopened_before_the_select(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run()
    [first] = (await api.claim()).json()["runs"]
    assert first["attempt"] == 1
    await seeded.expire_lease(run_id)
    [second] = (await api.claim()).json()["runs"]
    assert second["id"] == str(run_id)
    assert second["attempt"] == 2
    assert second["state"] == "claimed"


async def test_a_stale_claim_is_reopened_before_the_select_while_other_runs_are_open(
    api: AppClient, seeded: SeededQueue
) -> None:
    # The busy-queue claim is one statement that leases only when nothing is stale: with
    # open runs waiting, a stale claim must still be reopened first, so the stale run
    # (oldest, and urgent) is the one the next claim gets.
    stale_id = await seeded.run(priority="high")
    [first] = (await api.claim()).json()["runs"]
    assert first["id"] == str(stale_id)
    newer = await seeded.runs(3, priority="low")
    await seeded.expire_lease(stale_id)
    [again] = (await api.claim()).json()["runs"]
    assert again["id"] == str(stale_id)
    assert again["attempt"] == 2
    [next_one] = (await api.claim()).json()["runs"]
    assert next_one["id"] == str(newer[0])


async def test_stale_claim_at_the_ceiling_expires_instead(
    app_factory: Any, seeded: SeededQueue
) -> None:
    api = await app_factory(OPS_RUN_MAX_ATTEMPTS=2)
    run_id = await seeded.run()
    for expected_attempt in (1, 2):
        [run] = (await api.claim()).json()["runs"]
        assert run["attempt"] == expected_attempt
        await seeded.expire_lease(run_id)
    assert (await api.claim()).json()["runs"] == []
    row = await seeded.row(run_id)
    assert row["state"] == "expired"
    assert row["lease_until"] is None
    assert row["attempt"] == 2


async def test_claim_returns_the_repository_grant_exactly_as_admitted(
    api: AppClient, seeded: SeededQueue
) -> None:
    grant = {
        "version": "1",
        "allowed_paths": ["docs/", "README.md"],
        "commit_count": {"min": 1, "max": 1},
        "publish": False,
    }
    refs = {"correlation_id": "corr-1"}
    await seeded.run(repository_grant=grant, execution_refs=refs)
    [run] = (await api.claim()).json()["runs"]
    assert run["repository_grant"] == grant
    assert run["execution_refs"] == refs
    assert run["harness_profile_ref"] == "harness.agent-dev@1.0.0"


async def test_every_stale_claim_is_reopened_before_the_select_however_many_there_are(
    api: AppClient, seeded: SeededQueue
) -> None:
    # After a fleet-wide outage: more stale claims than one reclaim statement reopens
    # (queries.RECLAIM_STALE_BATCH, in lease order). The urgent run's lease ended last, so
    # it is not in the first batch; the claim must still get it, not a run that ranks
    # below it.
    from activity_core.queue.queries import RECLAIM_STALE_BATCH

    definition = await seeded.definition()
    stale_low = RECLAIM_STALE_BATCH + 100
    await seeded.conn.execute(
        """
        INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title,
                              source_type, source_id, triggering_event_id, priority, state,
                              claim_owner, lease_until, attempt, created_at)
        SELECT gen_random_uuid(), $1, 'outage:' || g, 'research/briefs', 'run ' || g,
               'rule', 'rule-1', 'outage:' || g, 'low', 'claimed', 'gone@worker',
               now() - interval '2 hours' + make_interval(secs => g), 1,
               now() - interval '1 day' + make_interval(secs => g)
        FROM generate_series(1, $2::int) AS g
        """,
        definition,
        stale_low,
    )
    urgent = await seeded.run(
        priority="high",
        state="claimed",
        claim_owner="gone@worker",
        lease_until=datetime.now().astimezone() - timedelta(minutes=1),
        attempt=1,
    )
    waiting = await seeded.run(priority="medium")

    [claimed] = (await api.claim()).json()["runs"]
    assert claimed["id"] == str(urgent)
    assert claimed["attempt"] == 2
    stale_left = await seeded.conn.fetchval(
        "SELECT count(*) FROM ops_runs WHERE state = 'claimed' AND lease_until <= now()"
    )
    assert stale_left == 0
    [next_one] = (await api.claim()).json()["runs"]
    assert next_one["id"] == str(waiting)
