"""Wire codes: values, HTTP statuses, and which refusals are conclusive."""

from ops_contracts import (
    CONCLUSIVE_CHANGES_REFUSALS,
    CONCLUSIVE_CLOSE_REFUSALS,
    REFUSAL_HTTP_STATUS,
    TERMINAL_STATES,
    CloseAction,
    CloseDisposition,
    LabelsMode,
    Priority,
    RefusalCode,
    RunState,
    SourceType,
)


def test_every_refusal_has_its_documented_status() -> None:
    assert dict(REFUSAL_HTTP_STATUS) == {
        RefusalCode.not_found: 404,
        RefusalCode.wrong_owner: 409,
        RefusalCode.expired_lease: 409,
        RefusalCode.state_conflict: 409,
        RefusalCode.evidence_conflict: 409,
        RefusalCode.terminal_conflict: 409,
        RefusalCode.unauthenticated: 401,
        RefusalCode.forbidden: 403,
        RefusalCode.worker_identity_mismatch: 403,
        RefusalCode.invalid_request: 422,
        RefusalCode.request_too_large: 413,
        RefusalCode.headers_too_large: 431,
        RefusalCode.request_timeout: 408,
        RefusalCode.unavailable: 503,
        RefusalCode.schema_not_current: 503,
        RefusalCode.method_not_allowed: 405,
        RefusalCode.unsupported_media_type: 415,
        RefusalCode.too_many_requests: 429,
        RefusalCode.changes_invalid: 422,
        RefusalCode.changes_conflict: 409,
        RefusalCode.changes_too_large: 413,
        RefusalCode.changes_not_stored: 409,
        RefusalCode.http_error: 400,
        RefusalCode.internal_error: 500,
    }
    assert set(REFUSAL_HTTP_STATUS) == set(RefusalCode)


def test_conclusive_close_refusals_are_the_six_close_codes() -> None:
    assert {str(code) for code in CONCLUSIVE_CLOSE_REFUSALS} == {
        "not_found",
        "wrong_owner",
        "expired_lease",
        "state_conflict",
        "evidence_conflict",
        "terminal_conflict",
    }


def test_changes_not_stored_is_not_conclusive_for_a_close() -> None:
    # the worker uploads its changes and closes again
    assert RefusalCode.changes_not_stored not in CONCLUSIVE_CLOSE_REFUSALS
    assert RefusalCode.changes_not_stored not in CONCLUSIVE_CHANGES_REFUSALS


def test_conclusive_changes_refusals_are_the_close_codes_and_the_bundle_codes() -> None:
    assert (
        CONCLUSIVE_CLOSE_REFUSALS
        | {
            RefusalCode.changes_invalid,
            RefusalCode.changes_conflict,
            RefusalCode.changes_too_large,
        }
        == CONCLUSIVE_CHANGES_REFUSALS
    )


def test_enum_wire_values() -> None:
    assert [m.value for m in RunState] == ["open", "claimed", "succeeded", "failed", "expired"]
    assert set(TERMINAL_STATES) == {RunState.succeeded, RunState.failed, RunState.expired}
    assert [m.value for m in CloseDisposition] == ["applied", "reconciled", "reopened"]
    assert [m.value for m in Priority] == ["low", "medium", "high"]
    assert [m.value for m in LabelsMode] == ["any", "all"]
    assert [m.value for m in CloseAction] == ["complete", "fail"]
    assert [m.value for m in SourceType] == ["rule", "instruction"]
    for enum in (RefusalCode, RunState, CloseDisposition, Priority, LabelsMode, SourceType):
        for member in enum:
            assert member.value == member.name == str(member)
