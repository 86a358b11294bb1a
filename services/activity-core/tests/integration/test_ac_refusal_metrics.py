"""Refusals are counted by code wherever they happen: edge (auth, validation, body) or queue."""

from __future__ import annotations

import uuid

from ac_testkit import AppClient


def refusals(api: AppClient, code: str) -> float:
    value = api.app.state.metrics.registry.get_sample_value(
        "ops_run_refusals_total", {"code": code}
    )
    return float(value or 0)


async def test_every_kind_of_refusal_is_counted(api: AppClient) -> None:
    await api.http.post("/ops-runs/claim", json={"worker_id": "w"})  # no credential
    await api.claim(limit=0)  # out of range
    await api.http.post(
        "/ops-runs/claim",
        content=b'{"worker_id": "w", "limit": NaN}',
        headers={**api.worker_headers(), "content-type": "application/json"},
    )
    await api.complete(uuid.uuid4(), {"ok": True})  # missing run
    await api.claim(worker_id="someone-else@x")  # token bound to another id
    assert refusals(api, "unauthenticated") == 1
    assert refusals(api, "invalid_request") == 2
    assert refusals(api, "not_found") == 1
    assert refusals(api, "worker_identity_mismatch") == 1
