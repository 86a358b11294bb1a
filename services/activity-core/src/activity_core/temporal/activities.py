"""The activities of `RunActivityWorkflow`: everything that touches the database or a sink.

Errors are translated here, at the edge to Temporal, into three kinds:

- final: a policy failure, a definition that is gone, paused or no longer valid. A
  non-retryable `ApplicationError`; the fire ends `failed` with it as its reason.
- transient: the database is unreachable, a transaction met a serialization failure or a
  deadlock, the IssueSink is down. Retryable, without an attempt limit: the workflow's
  retry policy keeps trying (the per-fire idempotency keys make every retry safe), and a
  fire cannot be recorded as failed while its database is away anyway.
- unexpected: anything else (a bug, a constraint the data breaks). Retried a few times, in
  case it was transient after all, then final, so that it ends as a failure an operator
  sees rather than a fire that retries forever.

While a fire's emission retries on an error its database can still take, the error is
noted on its `activity_runs` row, so the ops UI shows what it is waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any, NoReturn

import asyncpg
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activity_core.db.unavailable import is_unavailable
from activity_core.definitions.model import ActivityDefinitionSpec
from activity_core.emission.emit import emit_tasks
from activity_core.emission.errors import EmissionPolicyError, EmissionUnavailable
from activity_core.emission.fire import FireContext
from activity_core.emission.publish import SinkUnavailable, give_up, publish_pending, writes_owed
from activity_core.emission.sink import IssueSink
from activity_core.temporal import queries
from activity_core.temporal.payloads import (
    EmitInput,
    EmitOutcome,
    FirePolicy,
    MarkFailedInput,
    PublishInput,
    RecordedRun,
    RecordRunInput,
    SinkGiveUpInput,
    SinkOutcome,
)
from ops_evidence import sanitize_error

__all__ = [
    "DATABASE_UNAVAILABLE",
    "DEFINITION_INVALID",
    "DEFINITION_NOT_FOUND",
    "DEFINITION_PAUSED",
    "NON_RETRYABLE_ERROR_TYPES",
    "POLICY_ERROR",
    "SINK_UNAVAILABLE",
    "UNEXPECTED_ERROR",
    "UNEXPECTED_ERROR_ATTEMPTS",
    "ActivityCoreActivities",
]

log = logging.getLogger("activity_core.temporal")

POLICY_ERROR = "EmissionPolicyError"
DEFINITION_NOT_FOUND = "DefinitionNotFound"
DEFINITION_PAUSED = "DefinitionPaused"
DEFINITION_INVALID = "DefinitionInvalid"
UNEXPECTED_ERROR = "UnexpectedError"
DATABASE_UNAVAILABLE = "DatabaseUnavailable"
SINK_UNAVAILABLE = "SinkUnavailable"
# Listed on the retry policies too, so they stay final even if raised without the flag.
NON_RETRYABLE_ERROR_TYPES = (
    POLICY_ERROR,
    DEFINITION_NOT_FOUND,
    DEFINITION_PAUSED,
    DEFINITION_INVALID,
)
# An error we cannot classify is retried this many attempts in all, then final.
UNEXPECTED_ERROR_ATTEMPTS = 8
_NOTE_TIMEOUT_SECONDS = 5.0

# The database is not there (db/unavailable.py), or asked us to try again: retried
# without a limit.
_DB_TRY_AGAIN = (
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.ReadOnlySQLTransactionError,
)


def _unexpected(exc: Exception, step: str) -> ApplicationError:
    attempt = activity.info().attempt
    final = attempt >= UNEXPECTED_ERROR_ATTEMPTS
    message = sanitize_error(f"{step}: {type(exc).__name__}: {exc}")
    log.error(
        "%s failed unexpectedly (attempt %d%s): %s",
        step,
        attempt,
        ", final" if final else "",
        message,
        exc_info=exc,
    )
    return ApplicationError(message, type=UNEXPECTED_ERROR, non_retryable=final)


def _for_temporal(exc: Exception, step: str) -> ApplicationError:
    """`exc` as Temporal should see it (see the module docstring)."""
    if isinstance(exc, ApplicationError):
        return exc
    if isinstance(exc, EmissionUnavailable):
        return ApplicationError(str(exc), type=DATABASE_UNAVAILABLE)
    if isinstance(exc, SinkUnavailable):
        return ApplicationError(str(exc), type=SINK_UNAVAILABLE)
    if is_unavailable(exc) or isinstance(exc, _DB_TRY_AGAIN):
        return ApplicationError(
            f"database unavailable: {type(exc).__name__}", type=DATABASE_UNAVAILABLE
        )
    return _unexpected(exc, step)


def _reraise(exc: Exception, error: ApplicationError) -> NoReturn:
    if error is exc:
        raise error
    raise error from exc


class ActivityCoreActivities:
    """Bound to the worker's resources: the pool, the IssueSink, the emission policy and
    the fire policy (retry timing) from its settings."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        sink: IssueSink,
        *,
        queue_enabled: bool,
        require_profile: bool,
        fire_policy: FirePolicy,
    ) -> None:
        self._pool = pool
        self._sink = sink
        self._queue_enabled = queue_enabled
        self._require_profile = require_profile
        self._fire_policy = fire_policy

    @activity.defn(name="fire_policy")
    async def fire_policy(self) -> FirePolicy:
        """A local activity: the worker's retry timing, recorded in the fire's history."""
        return self._fire_policy

    @activity.defn(name="record_activity_run")
    async def record_activity_run(self, params: RecordRunInput) -> RecordedRun:
        try:
            return await self._record(params)
        except Exception as exc:
            _reraise(exc, _for_temporal(exc, "recording the fire"))

    async def _record(self, params: RecordRunInput) -> RecordedRun:
        definition = await self._pool.fetchrow(queries.DEFINITION_BY_SLUG, params.activity_slug)
        if definition is None:
            raise ApplicationError(
                f"no activity definition {params.activity_slug!r}",
                type=DEFINITION_NOT_FOUND,
                non_retryable=True,
            )
        row = await self._pool.fetchrow(
            queries.RECORD_ACTIVITY_RUN,
            uuid.uuid4(),
            definition["id"],
            params.workflow_id,
            params.run_id,
            params.trigger_key,
            params.triggering_event_id,
            params.scheduled_for,
            params.context,
            params.fired_at,
            params.retry_of,
        )
        assert row is not None  # DO UPDATE ... RETURNING always yields the row
        log.info(
            "activity run recorded",
            extra={
                "activity_id": params.activity_slug,
                "run_id": params.run_id,
                "trigger": row["triggering_event_id"],
                "workflow_id": params.workflow_id,
            },
        )
        return RecordedRun(
            activity_run_id=str(row["id"]), triggering_event_id=row["triggering_event_id"]
        )

    @activity.defn(name="emit_activity_run")
    async def emit(self, params: EmitInput) -> EmitOutcome:
        run_id = uuid.UUID(params.activity_run_id)
        try:
            return await self._emit(run_id)
        except Exception as exc:
            error = _for_temporal(exc, "emission")
            if not error.non_retryable:
                await self._note_retry(run_id, error)
            _reraise(exc, error)

    async def _emit(self, run_id: uuid.UUID) -> EmitOutcome:
        row = await self._pool.fetchrow(queries.ACTIVITY_RUN_FOR_EMIT, run_id)
        if row is None:
            raise ApplicationError(
                f"no activity run {run_id}", type=DEFINITION_NOT_FOUND, non_retryable=True
            )
        if row["status"] == "emitted":
            # This fire's emission committed already: an earlier attempt whose completion
            # never reached Temporal (its worker died, its answer was lost, it outlived
            # its timeout). Its ops runs are queued; what it still owes is its sink writes,
            # so it goes on to publish them. The pause and the definition are not looked
            # at again: they decide whether a fire emits, and this one has; refusing here
            # would end the fire failed with its writes pending for good (and a paused
            # automation's retry-fire is refused).
            owed = await writes_owed(self._pool, activity_run_id=run_id)
            log.info(
                "fire emitted already; %d sink write(s) to do",
                owed,
                extra={"activity_run_id": str(run_id), "run_id": row["run_id"]},
            )
            return EmitOutcome(emitted_count=row["emitted_count"], sink_writes_left=owed)
        if row["paused"]:
            raise ApplicationError(
                f"activity definition {row['slug']!r} is paused; nothing emitted",
                type=DEFINITION_PAUSED,
                non_retryable=True,
            )
        try:
            spec = ActivityDefinitionSpec.model_validate(row["definition"])
        except ValidationError as exc:
            # the stored form no longer validates (a rule tightened since the sync): final
            raise ApplicationError(
                f"stored definition {row['slug']!r} is invalid; re-run sync-definitions: "
                f"{exc.error_count()} error(s)",
                type=DEFINITION_INVALID,
                non_retryable=True,
            ) from exc
        fire = FireContext(
            activity_run_id=run_id,
            run_id=row["run_id"],
            trigger_key=row["trigger_key"],
            triggering_event_id=row["triggering_event_id"],
            scheduled_for=row["scheduled_for"],
            fired_at=row["started_at"],
            context=_as_dict(row["context"]),
        )
        try:
            report = await emit_tasks(
                self._pool,
                self._sink.name,
                spec=spec,
                fire=fire,
                queue_enabled=self._queue_enabled,
                require_profile=self._require_profile,
            )
        except EmissionPolicyError as exc:
            raise ApplicationError(str(exc), type=POLICY_ERROR, non_retryable=True) from exc
        return EmitOutcome(
            emitted_count=report.emitted_count, sink_writes_left=report.sink_writes_left
        )

    async def _note_retry(self, run_id: uuid.UUID, error: ApplicationError) -> None:
        attempt = activity.info().attempt
        log.warning(
            "emission failed (%s); Temporal retries it",
            error.type,
            extra={"activity_run_id": str(run_id), "attempt": attempt},
        )
        note = sanitize_error(f"retrying (attempt {attempt}): {error.message}")
        # the database may be what is down: then there is nothing to note it in, and the
        # note must not hold up the retry
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_NOTE_TIMEOUT_SECONDS):
                await self._pool.execute(queries.NOTE_RETRY, run_id, note)

    @activity.defn(name="publish_activity_run")
    async def publish(self, params: PublishInput) -> SinkOutcome:
        run_id = uuid.UUID(params.activity_run_id)
        try:
            totals = await publish_pending(self._pool, self._sink, activity_run_id=run_id)
        except Exception as exc:
            if isinstance(exc, SinkUnavailable):
                log.warning(
                    "IssueSink write failed (%s); Temporal retries it",
                    exc,
                    extra={"activity_run_id": str(run_id), "attempt": activity.info().attempt},
                )
            _reraise(exc, _for_temporal(exc, "IssueSink write"))
        return SinkOutcome(written=totals.written, failed=totals.failed)

    @activity.defn(name="give_up_sink_writes")
    async def give_up_sink_writes(self, params: SinkGiveUpInput) -> SinkOutcome:
        try:
            totals = await give_up(
                self._pool, activity_run_id=uuid.UUID(params.activity_run_id), reason=params.reason
            )
        except Exception as exc:
            _reraise(exc, _for_temporal(exc, "recording the IssueSink failure"))
        log.warning(
            "IssueSink writes failed for good: %s",
            params.reason[:500],
            extra={"activity_run_id": params.activity_run_id, "failed": totals.failed},
        )
        return SinkOutcome(written=totals.written, failed=totals.failed)

    @activity.defn(name="mark_activity_run_failed")
    async def mark_activity_run_failed(self, params: MarkFailedInput) -> None:
        reason = sanitize_error(params.reason)
        try:
            await self._pool.execute(queries.MARK_FAILED, uuid.UUID(params.activity_run_id), reason)
        except Exception as exc:
            _reraise(exc, _for_temporal(exc, "recording the failure"))
        log.warning("activity run failed: %s", reason, extra={"run_id": params.activity_run_id})

    def all(self) -> list[Any]:
        """The activity callables a worker registers."""
        return [
            self.fire_policy,
            self.record_activity_run,
            self.emit,
            self.publish,
            self.give_up_sink_writes,
            self.mark_activity_run_failed,
        ]


def _as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}
