"""Heartbeat refusals in order, and operator lease expiry."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from ac_testkit import AppClient, SeededQueue


async def test_heartbeat_extends_the_lease_from_now(api: AppClient, seeded: SeededQueue) -> None:
    run_id = await seeded.run()
    await api.claim(lease_seconds=5)
    response = await api.heartbeat(run_id, lease_seconds=600)
    assert response.status_code == 200
    lease_until = datetime.fromisoformat(response.json()["lease_until"])
    assert lease_until > datetime.now().astimezone() + timedelta(seconds=500)


async def test_heartbeat_refusals(api: AppClient, seeded: SeededQueue) -> None:
    missing = await api.heartbeat(uuid.uuid4())
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")

    open_run = await seeded.run()
    response = await api.heartbeat(open_run)
    assert (response.status_code, response.json()["code"]) == (409, "state_conflict")

    await api.claim()
    other = await api.heartbeat(open_run, worker_id="rein-aharness@other02")
    # the token is bound to WORKER_ID, so another id is refused before the row is read
    assert (other.status_code, other.json()["code"]) == (403, "worker_identity_mismatch")

    await seeded.conn.execute(
        "UPDATE ops_runs SET claim_owner = 'rein-aharness@other02' WHERE id = $1", open_run
    )
    response = await api.heartbeat(open_run)
    assert (response.status_code, response.json()["code"]) == (409, "wrong_owner")

    await seeded.conn.execute(
        "UPDATE ops_runs SET claim_owner = $2, lease_until = now() - interval '1 second' "
        "WHERE id = $1",
        open_run,
        "rein-aharness@test01",
    )
    response = await api.heartbeat(open_run)
    assert (response.status_code, response.json()["code"]) == (409, "expired_lease")
    assert (await seeded.row(open_run))["lease_until"] < datetime.now().astimezone()


async def test_an_expired_worker_cannot_revive_its_claim(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run()
    await api.claim()
    await seeded.expire_lease(run_id)
    assert (await api.heartbeat(run_id)).json()["code"] == "expired_lease"
    assert (await api.complete(run_id, {"ok": True})).json()["code"] == "expired_lease"


async def test_expire_leases_reopens_and_expires(app_factory: Any, seeded: SeededQueue) -> None:
    api = await app_factory(OPS_RUN_MAX_ATTEMPTS=2)
    below = await seeded.run()
    at_ceiling = await seeded.run()
    live = await seeded.run()
    await api.claim(limit=3)
    await seeded.conn.execute("UPDATE ops_runs SET attempt = 2 WHERE id = $1", at_ceiling)
    await seeded.expire_lease(below)
    await seeded.expire_lease(at_ceiling)

    worker = await api.http.post("/ops-runs/expire-leases", headers=api.worker_headers())
    assert worker.status_code == 403

    response = await api.http.post("/ops-runs/expire-leases", headers=api.operator_headers())
    assert response.status_code == 200
    assert response.json() == {"reopened": 1, "expired": 1}
    states = {r: (await seeded.row(r))["state"] for r in (below, at_ceiling, live)}
    assert states == {below: "open", at_ceiling: "expired", live: "claimed"}
    again = await api.http.post("/ops-runs/expire-leases", headers=api.operator_headers())
    assert again.json() == {"reopened": 0, "expired": 0}
