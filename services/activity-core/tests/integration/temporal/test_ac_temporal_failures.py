"""How emission failures meet Temporal's retries: a profile-policy failure is final on the
first attempt and emits nothing; an IssueSink outage never holds up the emission, and the
sink step is retried until it passes, without a duplicate ops_run."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, RetryState
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError

from ac_temporal_kit import TemporalHarness, definition


async def emit_attempts(
    handle: WorkflowHandle[Any, Any], activity: str = "emit_activity_run"
) -> tuple[list[int], WorkflowHistory]:
    """The attempt number of every started `activity` task, from the history."""
    history = await handle.fetch_history()
    scheduled = {
        event.event_id
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == activity
    }
    return [
        event.activity_task_started_event_attributes.attempt
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and event.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ], history


async def test_profile_policy_failure_is_not_retried_and_emits_nothing(
    strict_temporal: TemporalHarness,
) -> None:
    temporal = strict_temporal
    # synced while the flag was off; the worker now requires a harness profile
    await temporal.sync(definition(temporal.slug, cron=None, profile=None))
    handle = await temporal.start_fire(temporal.slug)

    with pytest.raises(WorkflowFailureError) as failed:
        await temporal.result(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "EmissionFailed"
    assert "EmissionPolicyError" in cause.message

    attempts, history = await emit_attempts(handle)
    assert attempts == [1]
    [activity_failed] = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        and e.activity_task_failed_event_attributes.failure.application_failure_info.type
        == "EmissionPolicyError"
    ]
    attributes = activity_failed.activity_task_failed_event_attributes
    assert attributes.retry_state == RetryState.RETRY_STATE_NON_RETRYABLE_FAILURE
    assert attributes.failure.application_failure_info.non_retryable

    assert await temporal.ops_runs() == []
    assert temporal.sink.calls == 0
    [run] = await temporal.activity_runs()
    assert run["status"] == "failed"
    assert run["finished_at"] is not None
    assert await temporal.pool.fetchval("SELECT count(*) FROM task_spawn_log") == 0


async def test_sink_failure_is_retried_without_a_duplicate_ops_run(
    temporal: TemporalHarness,
) -> None:
    await temporal.sync(definition(temporal.slug, cron=None))
    temporal.sink.failures = 2
    handle = await temporal.start_fire(temporal.slug)

    result = await temporal.result(handle)
    assert result.emitted_count == 1
    assert (result.sink_written, result.sink_failed) == (1, 0)
    # the emission went through at once; the sink step was retried on its own
    attempts, _ = await emit_attempts(handle)
    assert attempts == [1]
    attempts, _ = await emit_attempts(handle, "publish_activity_run")
    assert attempts == [3]  # Temporal records the start of the attempt that completed
    assert temporal.sink.calls == 3
    assert len(temporal.sink.published) == 1

    [ops] = await temporal.ops_runs()
    assert ops["triggering_event_id"] == result.triggering_event_id
    [run] = await temporal.activity_runs()
    assert run["status"] == "emitted"
    assert run["emitted_count"] == 1


async def test_a_stored_definition_that_no_longer_validates_is_not_retried(
    temporal: TemporalHarness,
) -> None:
    await temporal.sync(definition(temporal.slug, cron=None))
    await temporal.pool.execute(
        "UPDATE activity_definitions SET definition = definition || '{\"title\": 5}'::jsonb"
    )
    handle = await temporal.start_fire(temporal.slug)

    with pytest.raises(WorkflowFailureError) as failed:
        await temporal.result(handle)
    assert isinstance(failed.value.cause, ApplicationError)
    assert "DefinitionInvalid" in failed.value.cause.message
    attempts, _ = await emit_attempts(handle)
    assert attempts == [1]
    assert await temporal.ops_runs() == []
    [run] = await temporal.activity_runs()
    assert run["status"] == "failed"
