"""The activities of `RunActivityWorkflow`: everything that touches the database or a sink.

Errors are translated here, at the edge to Temporal: a policy failure (or a definition that
is gone or paused) becomes a non-retryable `ApplicationError` and ends the run on its first
attempt; an IssueSink failure is a retryable one, so Temporal retries the emission, which the
per-fire idempotency key makes safe.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import asyncpg
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..definitions.model import ActivityDefinitionSpec
from ..emission.emit import emit_tasks
from ..emission.errors import EmissionPolicyError, EmissionUnavailable, IssueSinkError
from ..emission.fire import FireContext
from ..emission.sink import IssueSink
from . import queries
from .payloads import EmitInput, EmitOutcome, MarkFailedInput, RecordedRun, RecordRunInput

log = logging.getLogger("activity_core.temporal")

POLICY_ERROR = "EmissionPolicyError"
DEFINITION_NOT_FOUND = "DefinitionNotFound"
DEFINITION_PAUSED = "DefinitionPaused"
DEFINITION_INVALID = "DefinitionInvalid"
# Listed on the retry policies too, so they stay final even if raised without the flag.
NON_RETRYABLE_ERROR_TYPES = (
    POLICY_ERROR,
    DEFINITION_NOT_FOUND,
    DEFINITION_PAUSED,
    DEFINITION_INVALID,
)


class ActivityCoreActivities:
    """Bound to the worker's resources: the pool, the IssueSink and the emission policy."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        sink: IssueSink,
        *,
        queue_enabled: bool,
        require_profile: bool,
    ) -> None:
        self._pool = pool
        self._sink = sink
        self._queue_enabled = queue_enabled
        self._require_profile = require_profile

    @activity.defn(name="record_activity_run")
    async def record_activity_run(self, params: RecordRunInput) -> RecordedRun:
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
        row = await self._pool.fetchrow(queries.ACTIVITY_RUN_FOR_EMIT, run_id)
        if row is None:
            raise ApplicationError(
                f"no activity run {params.activity_run_id}",
                type=DEFINITION_NOT_FOUND,
                non_retryable=True,
            )
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
                self._sink,
                spec=spec,
                fire=fire,
                queue_enabled=self._queue_enabled,
                require_profile=self._require_profile,
            )
        except EmissionPolicyError as exc:
            raise ApplicationError(str(exc), type=POLICY_ERROR, non_retryable=True) from exc
        except (IssueSinkError, EmissionUnavailable) as exc:
            log.warning(
                "emission failed (%s); Temporal retries it",
                type(exc).__name__,
                extra={"run_id": row["run_id"], "attempt": activity.info().attempt},
            )
            raise ApplicationError(str(exc), type=type(exc).__name__) from exc
        emitted = report.emitted_count
        await self._pool.execute(queries.MARK_EMITTED, run_id, emitted)
        return EmitOutcome(emitted_count=emitted)

    @activity.defn(name="mark_activity_run_failed")
    async def mark_activity_run_failed(self, params: MarkFailedInput) -> None:
        await self._pool.execute(queries.MARK_FAILED, uuid.UUID(params.activity_run_id))
        log.warning(
            "activity run failed: %s",
            params.reason[:500],
            extra={"run_id": params.activity_run_id},
        )

    def all(self) -> list[Any]:
        """The activity callables a worker registers."""
        return [self.record_activity_run, self.emit, self.mark_activity_run_failed]


def _as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}
