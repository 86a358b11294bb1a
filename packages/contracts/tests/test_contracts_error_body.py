"""The error body's code is the enumerated RefusalCode, in the model and in its schema."""

import pytest
from pydantic import ValidationError

from ops_contracts import ErrorBody, RefusalCode, RequeueOutcome


def test_an_error_body_takes_only_an_enumerated_code() -> None:
    body = ErrorBody.model_validate({"code": "unavailable", "detail": "retry"})
    assert body.code is RefusalCode.unavailable
    assert body.model_dump(mode="json", exclude_none=True) == {
        "code": "unavailable",
        "detail": "retry",
    }
    with pytest.raises(ValidationError):
        ErrorBody.model_validate({"code": "no_such_code", "detail": "?"})


def test_the_schema_enumerates_every_code() -> None:
    schema = ErrorBody.model_json_schema()
    assert schema["properties"]["code"] == {"$ref": "#/$defs/RefusalCode"}
    assert schema["$defs"]["RefusalCode"]["enum"] == [code.value for code in RefusalCode]


def test_a_bulk_requeue_outcome_carries_an_enumerated_code() -> None:
    run_id = "00000000-0000-4000-8000-000000000001"
    refused = RequeueOutcome.model_validate(
        {"run_id": run_id, "status": 409, "code": "state_conflict", "detail": "open"}
    )
    assert refused.code is RefusalCode.state_conflict
    with pytest.raises(ValidationError):
        RequeueOutcome.model_validate({"run_id": run_id, "status": 409, "code": "nope"})
