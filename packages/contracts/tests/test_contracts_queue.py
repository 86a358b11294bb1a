"""Queue request bodies are strict; response models describe the projections."""

import json
import math
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from pydantic import BaseModel, ValidationError

from ops_contracts import (
    PARSED_STRICT_JSON,
    ClaimRequest,
    ClaimResponse,
    CloseDisposition,
    CloseResponse,
    CompleteRequest,
    ErrorBody,
    ExpireLeasesResponse,
    FailRequest,
    HeartbeatRequest,
    LabelsMode,
    OpsRun,
    RunPage,
    RunState,
)


def refuses(model: type[BaseModel], body: dict[str, Any]) -> None:
    """A bad body is refused both as parsed JSON and as raw JSON text."""
    with pytest.raises(ValidationError):
        model.model_validate(body)
    with pytest.raises(ValidationError):
        model.model_validate_json(json.dumps(body))


def test_claim_defaults() -> None:
    claim = ClaimRequest.model_validate({"worker_id": "rein-aharness@railiance01"})
    assert claim.labels is None
    assert claim.labels_mode is LabelsMode.any
    assert claim.limit == 1
    assert claim.lease_seconds is None
    assert claim.wait_seconds == 0


def test_claim_spec_example_and_bounds() -> None:
    body = {
        "worker_id": "rein-aharness@railiance01",
        "labels": ["automated", "research-brief", "team:ops/x_1.2"],
        "labels_mode": "any",
        "limit": 100,
        "lease_seconds": 86_400,
        "wait_seconds": 20,
    }
    assert ClaimRequest.model_validate_json(json.dumps(body)).model_dump(mode="json") == body
    low = {**body, "limit": 1, "lease_seconds": 1, "wait_seconds": 0, "labels": ["a"]}
    assert ClaimRequest.model_validate(low).model_dump(mode="json") == low
    assert ClaimRequest.model_validate({**body, "lease_seconds": None}).lease_seconds is None


@pytest.mark.parametrize("mode", ["any", "all"])
def test_labels_mode_enum_accepts_its_json_value(mode: str) -> None:
    body = {"worker_id": "w", "labels": ["a"], "labels_mode": mode}
    assert ClaimRequest.model_validate_json(json.dumps(body)).labels_mode is LabelsMode(mode)
    assert ClaimRequest.model_validate(body).labels_mode is LabelsMode(mode)


@pytest.mark.parametrize(
    "override",
    [
        {"limit": "1"},
        {"limit": True},
        {"limit": 1.0},
        {"limit": 0},
        {"limit": 101},
        {"limit": None},
        {"lease_seconds": 0},
        {"lease_seconds": 86_401},
        {"lease_seconds": "900"},
        {"lease_seconds": False},
        {"wait_seconds": -1},
        {"wait_seconds": 21},
        {"wait_seconds": 2.5},
        {"labels": []},
        {"labels": [f"l{i}" for i in range(21)]},
        {"labels": "automated"},
        {"labels": ["has space"]},
        {"labels": ["x" * 101]},
        {"labels": [""]},
        {"labels": [1]},
        {"labels_mode": "some"},
        {"labels_mode": None},
        {"labels_mode": 1},
        {"unexpected": 1},
        {"worker_id": ""},
        {"worker_id": "w w"},
        {"worker_id": "w\n"},
        {"worker_id": "wörker"},
        {"worker_id": "w" * 201},
        {"worker_id": 7},
        {"worker_id": None},
    ],
)
def test_claim_refuses_bad_bodies(override: dict[str, Any]) -> None:
    refuses(ClaimRequest, {"worker_id": "rein-aharness@railiance01", **override})


def test_worker_id_is_required() -> None:
    refuses(ClaimRequest, {})
    assert ClaimRequest.model_validate({"worker_id": "w" * 200}).worker_id == "w" * 200
    assert ClaimRequest.model_validate({"worker_id": "a.b_c@d:e/f+g-h"})


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize("field", ["limit", "lease_seconds", "wait_seconds"])
def test_non_finite_numbers_in_claim_json_are_refused(number: str, field: str) -> None:
    with pytest.raises(ValidationError):
        ClaimRequest.model_validate_json(f'{{"worker_id": "w", "{field}": {number}}}')


def test_heartbeat() -> None:
    assert HeartbeatRequest.model_validate({"worker_id": "w"}).lease_seconds is None
    assert HeartbeatRequest.model_validate_json('{"worker_id": "w", "lease_seconds": 60}')
    for override in ({"lease_seconds": 0}, {"lease_seconds": "60"}, {"labels": ["a"]}):
        refuses(HeartbeatRequest, {"worker_id": "w", **override})


def test_complete_keeps_unknown_fields_inside_result() -> None:
    body = {"worker_id": "w", "result": {"path": "briefs/x.md", "ok": True, "extra": {"k": [1]}}}
    assert CompleteRequest.model_validate_json(json.dumps(body)).result == body["result"]


@pytest.mark.parametrize(
    "body",
    [
        {"worker_id": "w"},
        {"worker_id": "w", "result": None},
        {"worker_id": "w", "result": []},
        {"worker_id": "w", "result": "ok"},
        {"worker_id": "w", "result": {}, "error": "x"},
        {"worker_id": "bad id", "result": {}},
    ],
)
def test_complete_refuses_bad_bodies(body: dict[str, Any]) -> None:
    refuses(CompleteRequest, body)


@pytest.mark.parametrize(
    "result_json",
    [
        '{"x": NaN}',
        '{"x": Infinity}',
        '{"a": {"b": [1, -Infinity]}}',
        '{"x": 1e999}',
    ],
)
@pytest.mark.parametrize("model", [CompleteRequest, FailRequest])
def test_non_finite_numbers_anywhere_in_result_are_refused(
    result_json: str, model: type[BaseModel]
) -> None:
    with pytest.raises(ValidationError):
        model.model_validate_json(
            f'{{"worker_id": "w", "error": "e", "result": {result_json}}}'
            if model is FailRequest
            else f'{{"worker_id": "w", "result": {result_json}}}'
        )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"deep": [float("-inf")]}, object()])
def test_non_json_values_in_a_parsed_result_are_refused(bad: object) -> None:
    with pytest.raises(ValidationError):
        CompleteRequest.model_validate({"worker_id": "w", "result": {"x": bad}})
    with pytest.raises(ValidationError):
        FailRequest.model_validate({"worker_id": "w", "error": "e", "result": {"x": bad}})


def test_a_value_parsed_from_strict_json_is_taken_as_finite_json_and_any_other_is_checked() -> None:
    # PARSED_STRICT_JSON is the caller's promise that a strict parser made the value; the
    # models then skip the encoding that proves it. Without the promise they check.
    body = {"worker_id": "w", "result": {"x": [1, {"y": "z"}]}}
    assert CompleteRequest.model_validate(body, context=PARSED_STRICT_JSON).result == body["result"]
    unproven = {"worker_id": "w", "result": {"x": float("nan")}}
    taken = CompleteRequest.model_validate(unproven, context=PARSED_STRICT_JSON)
    assert math.isnan(taken.result["x"])
    with pytest.raises(ValidationError):
        CompleteRequest.model_validate(unproven)
    with pytest.raises(ValidationError):
        CompleteRequest.model_validate(unproven, context={"parsed_strict_json": False})


def test_fail_defaults_and_bounds() -> None:
    fail = FailRequest.model_validate_json('{"error": "llm timeout", "worker_id": "w"}')
    assert (fail.reopen, fail.result) == (False, None)
    assert FailRequest.model_validate({"worker_id": "w", "error": "e" * 4096, "reopen": True})


@pytest.mark.parametrize(
    "override",
    [
        {"error": ""},
        {"error": "e" * 4097},
        {"error": None},
        {"error": 1},
        {"reopen": "true"},
        {"reopen": 1},
        {"reopen": None},
        {"result": []},
        {"close": True},
    ],
)
def test_fail_refuses_bad_bodies(override: dict[str, Any]) -> None:
    refuses(FailRequest, {"worker_id": "w", "error": "llm timeout", **override})


def test_fail_requires_an_error() -> None:
    refuses(FailRequest, {"worker_id": "w"})


def run_row(**overrides: Any) -> dict[str, Any]:
    now = datetime(2025, 1, 6, 6, 0, tzinfo=UTC).isoformat()
    row: dict[str, Any] = {
        "id": str(uuid4()),
        "activity_definition_id": str(uuid4()),
        "idempotency_key": "fi-daily-brief:daily-brief:scheduled:2025-01-06T06:00:00+01:00",
        "target_repo": "research/briefs",
        "title": "Research brief for 2025-01-06",
        "description": "",
        "labels": ["automated", "research-brief"],
        "priority": "medium",
        "state": "claimed",
        "claim_owner": "rein-aharness@railiance01",
        "lease_until": now,
        "attempt": 1,
        "source_type": "rule",
        "source_id": "daily-brief",
        "triggering_event_id": "scheduled:2025-01-06T06:00:00+01:00",
        "approach_hint": None,
        "harness_profile_ref": "harness.agent-dev@1.0.0",
        "execution_refs": {"correlation_id": "c-1"},
        "repository_grant": {
            "version": "1",
            "allowed_paths": ["briefs/"],
            "commit_count": {"min": 1, "max": 1},
            "publish": False,
        },
        "result": None,
        "last_error": None,
        "created_at": now,
        "updated_at": now,
    }
    row.update(overrides)
    return row


def test_run_projection_round_trips_and_has_no_close_digest() -> None:
    row = run_row()
    run = OpsRun.model_validate_json(json.dumps(row))
    assert run.state is RunState.claimed
    assert run.model_dump(mode="json")["repository_grant"] == row["repository_grant"]
    assert "close_intent_digest" not in OpsRun.model_fields
    page = RunPage.model_validate({"runs": [row], "next_cursor": None})
    assert page.runs[0].id == run.id
    assert ClaimResponse.model_validate({"runs": []}).runs == []


def test_close_response_carries_the_disposition() -> None:
    body = run_row(state="succeeded", claim_owner=None, lease_until=None, result={"ok": True})
    closed = CloseResponse.model_validate({**body, "close_disposition": "reconciled"})
    assert closed.close_disposition is CloseDisposition.reconciled
    with pytest.raises(ValidationError):
        CloseResponse.model_validate(body)


def test_error_bodies() -> None:
    assert ErrorBody(code="not_found", detail="no such run").model_dump(exclude_none=True) == {
        "code": "not_found",
        "detail": "no such run",
    }
    invalid = ErrorBody.model_validate(
        {
            "code": "invalid_request",
            "detail": "1 invalid field",
            "errors": [{"loc": ["body", "limit"], "msg": "too big", "type": "less_than_equal"}],
        }
    )
    assert invalid.errors is not None
    assert invalid.errors[0].loc == ["body", "limit"]
    assert ExpireLeasesResponse.model_validate({"reopened": 2, "expired": 1}).expired == 1
