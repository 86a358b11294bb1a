"""`PublishChangesWorkflow`: an operator-approved publication of one run's changes.

push (publication/activities.py: re-check, push create-only, record) -> the pull request
(when Forgejo is configured) -> done. Durable: the worker may die at any point; Temporal
gives the activity to another worker (the heartbeat timeout notices a dead one within
seconds), and the push is idempotent by the remote's ref (already at head_after: no
second push).

Timing: the push is retried (remote or database away) 1 s doubling to 60 s for at most
PUSH_WINDOW (1 h); then the publication is recorded failed with the last error and can
be asked for again. A refusal (a bundle that is not the run's, a taken ref) is final at
once. The pull request is retried the same way for PULL_REQUEST_WINDOW; when it gives
up the branch stays published and the row's error says the pull request is missing.

The workflow fails (a non-retryable ApplicationError) whenever the publication failed,
and completes only when it is published: the API starts it with
ALLOW_DUPLICATE_FAILED_ONLY, so a failed publication may be asked for again while a
published one can never be run again under its id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

__all__ = ["PULL_REQUEST_WINDOW", "PUSH_WINDOW", "PublishChangesWorkflow"]

with workflow.unsafe.imports_passed_through():
    from activity_core.publication.activities import PublicationActivities
    from activity_core.publication.payloads import (
        PUBLICATION_REFUSED,
        PUBLISH_WORKFLOW_NAME,
        PublicationFailedInput,
        PublishChangesInput,
        PublishChangesResult,
        PullRequestInput,
    )

PUSH_WINDOW = timedelta(hours=1)
PULL_REQUEST_WINDOW = timedelta(hours=1)
_STEP = timedelta(minutes=10)
_HEARTBEAT = timedelta(seconds=10)
_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,
    non_retryable_error_types=[PUBLICATION_REFUSED],
)
_DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
)


async def _record(
    step: Callable[[PublicationActivities, PublicationFailedInput], Awaitable[None]],
    params: PublishChangesInput,
    reason: str,
) -> None:
    """A step that gave up, recorded in the publication's row: a database write, retried
    for as long as the database is away."""
    await workflow.execute_activity_method(
        step,
        PublicationFailedInput(publication=params, reason=reason),
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=_DB_RETRY,
    )


@workflow.defn(name=PUBLISH_WORKFLOW_NAME)
class PublishChangesWorkflow:
    @workflow.run
    async def run(self, params: PublishChangesInput) -> PublishChangesResult:
        try:
            push = await workflow.execute_activity_method(
                PublicationActivities.push,
                params,
                start_to_close_timeout=_STEP,
                schedule_to_close_timeout=PUSH_WINDOW,
                heartbeat_timeout=_HEARTBEAT,
                retry_policy=_RETRY,
            )
        except ActivityError as exc:
            cause = exc.cause
            reason = cause.message if isinstance(cause, ApplicationError) else str(exc)
            refused = isinstance(cause, ApplicationError) and cause.type == PUBLICATION_REFUSED
            if not refused:
                reason = f"gave up after retrying: {reason}"
                await _record(PublicationActivities.mark_failed, params, reason)
            raise ApplicationError(
                f"publication failed: {reason}", type="PublicationFailed", non_retryable=True
            ) from exc
        url: str | None = None
        error: str | None = None
        if push.pull_requests:
            try:
                url = await workflow.execute_activity_method(
                    PublicationActivities.pull_request,
                    PullRequestInput(publication=params, push=push),
                    start_to_close_timeout=_STEP,
                    schedule_to_close_timeout=PULL_REQUEST_WINDOW,
                    heartbeat_timeout=_HEARTBEAT,
                    retry_policy=_RETRY,
                )
            except ActivityError as exc:
                error = f"the pull request could not be opened: {exc.cause or exc}"
                await _record(PublicationActivities.pull_request_gave_up, params, error)
        return PublishChangesResult(
            state="published",
            ref=push.ref,
            commit=push.commit,
            pull_request_url=url,
            error=error,
        )
