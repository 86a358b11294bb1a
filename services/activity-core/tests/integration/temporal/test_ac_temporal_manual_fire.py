"""Manual fire, end to end: HTTP -> RunActivityWorkflow -> ops_run carrying the request's
attribution; and the endpoint's refusals."""

from __future__ import annotations

import uuid
from typing import Any

from ac_temporal_kit import TemporalHarness, automation_app, definition, temporal_app
from activity_core.definitions.model import definition_uuid
from activity_core.temporal.dev_server import free_port


async def test_manual_fire_runs_the_workflow_and_queues_the_request_attribution(
    temporal: TemporalHarness, app_factory: Any
) -> None:
    spec, api, operator, path = await automation_app(temporal, app_factory, cron=None)

    response = await api.http.post(
        f"{path}/fire",
        json={"correlation_id": "corr-42", "goal_ref": "goal-7", "params": {"depth": 2}},
        headers=operator,
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["workflow_id"] == f"activity:{spec.id}:{body['trigger_key']}"
    assert body["trigger_key"].startswith("manual:")
    result = await temporal.fired(body)
    assert result.triggering_event_id == body["trigger_key"]
    assert result.emitted_count == 1

    [run] = await temporal.activity_runs()
    assert run["run_id"] == body["run_id"]
    assert run["workflow_id"] == body["workflow_id"]
    assert run["trigger_key"] == body["trigger_key"]
    assert run["scheduled_for"] is None
    assert run["status"] == "emitted"
    assert run["context"] == {
        "request": {"correlation_id": "corr-42", "goal_ref": "goal-7", "params": {"depth": 2}}
    }
    [ops] = await temporal.ops_runs()
    assert ops["execution_refs"] == {"correlation_id": "corr-42"}
    assert ops["triggering_event_id"] == body["trigger_key"]
    assert ops["state"] == "open"

    # by UUID as well; every manual fire is its own event, so a second ops_run
    second = await api.http.post(
        f"/ops/automations/{definition_uuid(spec.id)}/fire",
        json={"correlation_id": "corr-43"},
        headers=api.operator_headers(),
    )
    assert second.status_code == 202, second.text
    assert second.json()["trigger_key"] != body["trigger_key"]
    await temporal.result(
        temporal.client.get_workflow_handle(
            second.json()["workflow_id"], run_id=second.json()["run_id"]
        )
    )
    assert {r["execution_refs"]["correlation_id"] for r in await temporal.ops_runs()} == {
        "corr-42",
        "corr-43",
    }


async def test_fire_refusals(temporal: TemporalHarness, app_factory: Any) -> None:
    active = definition(temporal.slug, cron=None)
    paused = definition(f"{temporal.slug}-paused", cron=None, paused=True)
    await temporal.sync(active, paused)
    api = await temporal_app(temporal, app_factory)
    path = f"/ops/automations/{active.id}/fire"
    operator = api.operator_headers()

    unknown = await api.http.post("/ops/automations/no-such-thing/fire", json={}, headers=operator)
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "not_found"
    by_uuid = await api.http.post(f"/ops/automations/{uuid.uuid4()}/fire", headers=operator)
    assert by_uuid.status_code == 404

    assert (await api.http.post(path, json={})).status_code == 401
    as_worker = await api.http.post(path, json={}, headers=api.worker_headers())
    assert as_worker.status_code == 403

    for bad in (
        [1, 2],
        "text",
        {"unknown_field": 1},
        {"correlation_id": ""},
        {"correlation_id": "a\u0000b"},
        {"goal_refs": "not-a-list"},
        {"params": [1]},
        {"params": {"k": "a\u0000b"}},
        {"params": {"blob": "x" * 20_000}},
    ):
        response = await api.http.post(path, json=bad, headers=operator)
        assert response.status_code == 422, (bad, response.text)
        assert response.json()["code"] == "invalid_request"

    refused = await api.http.post(f"/ops/automations/{paused.id}/fire", headers=operator)
    assert refused.status_code == 409
    assert refused.json()["code"] == "state_conflict"

    # nothing of the above started a workflow
    assert await temporal.activity_runs() == []


async def test_fire_answers_503_while_temporal_is_down_and_the_queue_api_still_works(
    temporal: TemporalHarness, app_factory: Any
) -> None:
    spec = await temporal.define(cron=None)
    api = await temporal_app(temporal, app_factory, TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")

    response = await api.http.post(
        f"/ops/automations/{spec.id}/fire", json={}, headers=api.operator_headers()
    )
    assert response.status_code == 503
    assert response.json() == {"code": "unavailable", "detail": "Temporal is not reachable; retry"}
    assert response.headers["Retry-After"]

    listing = await api.http.get("/ops-runs", headers=api.operator_headers())
    assert listing.status_code == 200
