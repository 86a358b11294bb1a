"""`RunActivityWorkflow`: one fire of an activity definition, scheduled or manual.

record the activity_run -> emit its tasks -> the run ends `emitted`, or `failed` when
emission gives up. Workflow code is deterministic: time is `workflow.now()`, the run id and
the scheduled time come from `workflow.info()`, everything with I/O is an activity. Our
modules are imported through the sandbox (passed through), they are not re-executed in it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from ..emission.trigger import emit_triggering_event_id
    from .activities import NON_RETRYABLE_ERROR_TYPES, ActivityCoreActivities
    from .fire_context import fire_context
    from .payloads import (
        WORKFLOW_NAME,
        EmitInput,
        MarkFailedInput,
        RecordRunInput,
        RunActivityInput,
        RunActivityResult,
    )

# Set by the Temporal scheduler on every workflow a schedule starts (also for backfills and
# triggers): the nominal fire time, which makes the fire's identity.
SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")

# The database steps: a few quick retries cover a restarting PostgreSQL.
_DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
)

# Emission: the IssueSink may be down for a while. Bounded attempts with backoff (about four
# minutes in all); the per-fire idempotency key makes every retry safe. Policy failures are
# raised as non-retryable and end the run on the first attempt.
_EMIT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
    non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
)


@workflow.defn(name=WORKFLOW_NAME)
class RunActivityWorkflow:
    @workflow.run
    async def run(self, params: RunActivityInput) -> RunActivityResult:
        info = workflow.info()
        scheduled_for = info.typed_search_attributes.get(SCHEDULED_START_TIME)
        triggering_event_id = emit_triggering_event_id(
            params.trigger_key, scheduled_for, info.run_id
        )
        recorded = await workflow.execute_activity_method(
            ActivityCoreActivities.record_activity_run,
            RecordRunInput(
                activity_slug=params.activity_slug,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                trigger_key=params.trigger_key,
                triggering_event_id=triggering_event_id,
                scheduled_for=scheduled_for,
                fired_at=workflow.now(),
                context=fire_context(params, scheduled_for),
            ),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_DB_RETRY,
        )
        try:
            outcome = await workflow.execute_activity_method(
                ActivityCoreActivities.emit,
                EmitInput(activity_run_id=recorded.activity_run_id),
                start_to_close_timeout=timedelta(minutes=2),
                retry_policy=_EMIT_RETRY,
            )
        except ActivityError as exc:
            reason = _reason(exc)
            await workflow.execute_activity_method(
                ActivityCoreActivities.mark_activity_run_failed,
                MarkFailedInput(activity_run_id=recorded.activity_run_id, reason=reason),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=_DB_RETRY,
            )
            raise ApplicationError(
                f"emission failed: {reason}", type="EmissionFailed", non_retryable=True
            ) from exc
        return RunActivityResult(
            activity_run_id=recorded.activity_run_id,
            triggering_event_id=recorded.triggering_event_id,
            emitted_count=outcome.emitted_count,
        )


def _reason(exc: ActivityError) -> str:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'ApplicationError'}: {cause.message}"
    return str(cause or exc)
