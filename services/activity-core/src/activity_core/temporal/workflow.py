"""`RunActivityWorkflow`: one fire of an activity definition, scheduled, manual or retried.

record the activity_run -> emit its ops runs and audit rows (one transaction) -> write the
IssueSink. A fire ends `emitted`, or `failed` with its reason (shown in the ops UI and the
runs JSON), never as nothing: Temporal holds it, durably, through whatever is away.

Workflow code is deterministic: time is `workflow.now()`, the run id and the scheduled time
come from `workflow.info()`, the retry timing from the `fire_policy` local activity (the
worker's settings, recorded in the history), everything with I/O is an activity. Our
modules are imported through the sandbox (passed through), they are not re-executed in it.

Why the timing is what it is (defaults; `FirePolicy` carries them, settings name them):

- No execution timeout (schedules and manual fires start it without one). A fire whose
  worker is away waits in Temporal until a worker takes it, hours later if need be; a
  timeout would end it as nothing. A schedule that misses its fire time because the
  Temporal server itself was away takes the fire when it is back, within the schedule's
  catch-up window (`schedules.py`).
- Database steps (record, emit, and the failure and sink bookkeeping): retried without an
  attempt limit, 1 s doubling to at most ACTIVITY_CORE_FIRE_RETRY_MAX_SECONDS (30 s). A
  fire can only be recorded, emitted or marked failed in its database, so giving up while
  it is away would lose the fire; an outage of minutes or hours costs at most 30 s after
  it ends, and an attempt against a database that is down is one refused connection.
  Errors that are not about availability are final after a few attempts (activities.py),
  so a fire never retries a bug forever: it ends failed, with the error as its reason.
- Each database attempt is bounded (start-to-close 30 s, 2 min for the emission's
  transaction), so a connection that hangs rather than refuses is abandoned and retried.
- An emit attempt whose transaction committed but whose completion was lost (its worker
  killed, its answer lost) is retried like any other; the retry finds the fire `emitted`
  and answers what it owes the sink without looking at the pause or the definition again
  (activities.py), so the writes are published even if the automation was paused since.
- The IssueSink write: its own step after the emission, so every ops run is queued
  whatever the sink does. Retried without an attempt limit, 1 s doubling to at most
  ACTIVITY_CORE_SINK_RETRY_MAX_SECONDS (5 min: light on a State Hub that is coming back,
  and an hour-long outage is written within 5 min of its end), for
  ACTIVITY_CORE_SINK_RETRY_WINDOW_SECONDS (24 h) after the emission; then the writes
  still pending are recorded as failed with their last error (the fire stays `emitted`:
  its ops runs are queued) and `activity-core retry-fire` sends them again. A write the
  sink refuses (a 4xx) fails at once: it would be refused again.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

__all__ = ["FIRE_POLICY_PATCH", "PRE_POLICY_FIRES", "SCHEDULED_START_TIME", "RunActivityWorkflow"]

with workflow.unsafe.imports_passed_through():
    from activity_core.emission.trigger import emit_triggering_event_id
    from activity_core.temporal.activities import NON_RETRYABLE_ERROR_TYPES, ActivityCoreActivities
    from activity_core.temporal.fire_context import fire_context
    from activity_core.temporal.payloads import (
        WORKFLOW_NAME,
        EmitInput,
        FirePolicy,
        MarkFailedInput,
        PublishInput,
        RecordRunInput,
        RunActivityInput,
        RunActivityResult,
        SinkGiveUpInput,
        SinkOutcome,
    )

# Set by the Temporal scheduler on every workflow a schedule starts (also for backfills and
# triggers): the nominal fire time, which makes the fire's identity.
SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")

# A fire that was running when the worker was upgraded from the build before the fire
# policy replays without the local activity (its history has none) and goes on with the
# default timing; every later step of such a fire is new and runs as for any fire.
FIRE_POLICY_PATCH = "fire-policy"
PRE_POLICY_FIRES = FirePolicy(
    db_retry_max_seconds=30, sink_retry_max_seconds=300, sink_retry_window_seconds=86_400
)

_FIRST_RETRY = timedelta(seconds=1)
_DB_STEP = timedelta(seconds=30)
_EMIT_STEP = timedelta(minutes=2)
# one try at the sink's pending writes (each write has its own bounded retries inside)
_SINK_STEP = timedelta(minutes=5)


def _retry(maximum_seconds: float) -> RetryPolicy:
    """Unlimited attempts, 1 s doubling up to `maximum_seconds`; final errors stay final."""
    maximum = timedelta(seconds=maximum_seconds)
    return RetryPolicy(
        initial_interval=min(_FIRST_RETRY, maximum),
        backoff_coefficient=2.0,
        maximum_interval=maximum,
        maximum_attempts=0,
        non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
    )


@workflow.defn(name=WORKFLOW_NAME)
class RunActivityWorkflow:
    @workflow.run
    async def run(self, params: RunActivityInput) -> RunActivityResult:
        info = workflow.info()
        scheduled_for = params.scheduled_for or info.typed_search_attributes.get(
            SCHEDULED_START_TIME
        )
        triggering_event_id = params.triggering_event_id or emit_triggering_event_id(
            params.trigger_key, scheduled_for, info.run_id
        )
        if workflow.patched(FIRE_POLICY_PATCH):
            policy: FirePolicy = await workflow.execute_local_activity_method(
                ActivityCoreActivities.fire_policy,
                start_to_close_timeout=timedelta(seconds=10),
            )
        else:
            policy = PRE_POLICY_FIRES
        db_retry = _retry(policy.db_retry_max_seconds)
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
                retry_of=params.retry_of,
            ),
            start_to_close_timeout=_DB_STEP,
            retry_policy=db_retry,
        )
        try:
            outcome = await workflow.execute_activity_method(
                ActivityCoreActivities.emit,
                EmitInput(activity_run_id=recorded.activity_run_id),
                start_to_close_timeout=_EMIT_STEP,
                retry_policy=db_retry,
            )
        except ActivityError as exc:
            reason = _reason(exc)
            await workflow.execute_activity_method(
                ActivityCoreActivities.mark_activity_run_failed,
                MarkFailedInput(activity_run_id=recorded.activity_run_id, reason=reason),
                start_to_close_timeout=_DB_STEP,
                retry_policy=db_retry,
            )
            raise ApplicationError(
                f"emission failed: {reason}", type="EmissionFailed", non_retryable=True
            ) from exc
        sink = SinkOutcome(written=0, failed=0)
        if outcome.sink_writes_left:
            try:
                sink = await workflow.execute_activity_method(
                    ActivityCoreActivities.publish,
                    PublishInput(activity_run_id=recorded.activity_run_id),
                    start_to_close_timeout=_SINK_STEP,
                    schedule_to_close_timeout=timedelta(seconds=policy.sink_retry_window_seconds),
                    retry_policy=_retry(policy.sink_retry_max_seconds),
                )
            except ActivityError as exc:
                sink = await workflow.execute_activity_method(
                    ActivityCoreActivities.give_up_sink_writes,
                    SinkGiveUpInput(
                        activity_run_id=recorded.activity_run_id,
                        reason=f"IssueSink write gave up: {_reason(exc)}",
                    ),
                    start_to_close_timeout=_DB_STEP,
                    retry_policy=db_retry,
                )
        return RunActivityResult(
            activity_run_id=recorded.activity_run_id,
            triggering_event_id=recorded.triggering_event_id,
            emitted_count=outcome.emitted_count,
            sink_written=sink.written,
            sink_failed=sink.failed,
        )


def _reason(exc: ActivityError) -> str:
    return _describe(exc.cause or exc)


def _describe(error: BaseException) -> str:
    if isinstance(error, ApplicationError):
        return f"{error.type or 'ApplicationError'}: {error.message}"
    if isinstance(error, FailureError) and error.cause is not None:
        # a timeout (the end of the sink's retry window) carries the last attempt's failure
        return f"{type(error).__name__}: {error.message}; last error: {_describe(error.cause)}"
    return str(error)
