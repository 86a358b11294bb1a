"""Manual fire and retry: start `RunActivityWorkflow` for one automation.

- `fire_manual`: an operator's request context and a unique trigger key (`manual:{uuid4}`),
  so every manual fire is its own triggering event and its own ops_runs. With the
  operator's idempotency key the trigger key is derived from it instead
  (`manual:key:{sha256(key), 32 hex}`, so any key fits the workflow id and the columns),
  and so is the workflow id (`activity:{slug}:{trigger key}`, never reused:
  REJECT_DUPLICATE): Temporal refuses a second start of that fire, running or closed, and
  the repeat is answered with the first start's workflow and run id (audited `repeated`).
  Past Temporal's retention a start could happen again, but under the same trigger key,
  whose runs are found (`duplicate`), never emitted twice. A repeat is not compared with
  the first request's context: the key names the fire.

  The audit entry is written first, as the intent, in a transaction that stays open across
  the start and commits after it: a failed write means nothing started (503, retry with
  the same key); a failed start rolls the entry back. Once a workflow started, the answer
  is its result: a COMMIT that fails after the start is logged (the entry is lost), never
  answered 503 "retry".
- `retry_fire`: one earlier fire again, with its trigger key, triggering event, scheduled
  time and request context, so it has the same idempotency keys: the ops runs it emitted
  are found (`duplicate`), the ones it did not are created, and the IssueSink writes it
  left pending or failed are sent again. For a fire that failed (once its cause is
  fixed) or whose sink writes failed; retrying any other fire changes nothing.

Neither sets an execution timeout: a fire waits for a worker however long it takes.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Union

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from activity_core.db.unavailable import unavailable_on_loss
from activity_core.temporal import queries
from activity_core.temporal.audit_entry import ActionAudit, Unaudited
from activity_core.temporal.client import TemporalClientProvider
from activity_core.temporal.errors import (
    AutomationNotFound,
    AutomationPaused,
    FireNotFound,
    TemporalUnavailable,
)
from activity_core.temporal.payloads import (
    MANUAL_TRIGGER_PREFIX,
    WORKFLOW_NAME,
    RunActivityInput,
    RunActivityResult,
)
from activity_core.temporal.request_start import (
    describe_workflow,
    start_then_commit,
    start_workflow,
)
from activity_core.uuid_text import uuid_or_none

__all__ = ["FireResult", "fire_manual", "manual_trigger_key", "retry_fire"]

log = logging.getLogger("activity_core.temporal.fire")

# An idempotency key's part of its trigger key: 128 bits of its SHA-256, so a key of any
# length and alphabet gives a workflow id within Temporal's bound and our columns.
KEY_DIGEST_LENGTH = 32

Executor = Union["PoolConnectionProxy[asyncpg.Record]", asyncpg.Pool]


@dataclass(frozen=True)
class FireResult:
    workflow_id: str
    run_id: str
    trigger_key: str


def manual_trigger_key(idempotency_key: str | None = None) -> str:
    """A fresh trigger key, or the one an operator's idempotency key names."""
    if idempotency_key is None:
        return f"{MANUAL_TRIGGER_PREFIX}{uuid.uuid4()}"
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:KEY_DIGEST_LENGTH]
    return f"{MANUAL_TRIGGER_PREFIX}key:{digest}"


async def _definition(executor: Executor, automation: str) -> asyncpg.Record | None:
    try:
        by_id = uuid.UUID(automation)
    except ValueError:
        return await executor.fetchrow(queries.DEFINITION_BY_SLUG, automation)
    return await executor.fetchrow(queries.DEFINITION_BY_ID, by_id)


async def fire_manual(
    pool: asyncpg.Pool,
    temporal: TemporalClientProvider,
    *,
    automation: str,
    request: dict[str, Any],
    task_queue: str,
    idempotency_key: str | None = None,
    audit: ActionAudit | None = None,
) -> FireResult:
    """`automation` is the definition's UUID or its slug; `audit` writes the fire's entry
    (the module docstring says when).

    Raises AutomationNotFound, AutomationPaused, DatabaseUnavailable or TemporalUnavailable.
    """
    audit = audit or Unaudited()
    async with start_then_commit(pool, lost_commit=_lost_commit) as (conn, started):
        row = await _definition(conn, automation)
        if row is None:
            raise AutomationNotFound(f"no automation {automation!r}")
        slug: str = row["slug"]
        audit.resolved("automation", slug)
        trigger_key = manual_trigger_key(idempotency_key)
        workflow_id = f"activity:{slug}:{trigger_key}"
        details: dict[str, Any] = {"workflow_id": workflow_id, "trigger_key": trigger_key}
        if idempotency_key is not None:
            details["idempotency_key"] = idempotency_key
        if row["paused"]:
            # a repeat of a fire made before the pause is answered as the first time
            earlier = (
                await _started(temporal, workflow_id, trigger_key)
                if idempotency_key is not None
                else None
            )
            if earlier is None:
                raise AutomationPaused(f"automation {slug!r} is paused; it does not fire")
            await audit.write(conn, {**details, "run_id": earlier.run_id}, repeated=True)
            return earlier
        intent = conn.transaction()  # a savepoint: a repeat's entry replaces it
        await intent.start()
        await audit.write(conn, details)
        params = RunActivityInput(activity_slug=slug, trigger_key=trigger_key, request=request)
        try:
            started.answer = await _start(
                temporal, params, workflow_id=workflow_id, task_queue=task_queue
            )
        except WorkflowAlreadyStartedError as exc:
            await intent.rollback()
            repeat = await _earlier(temporal, exc, trigger_key)
            await audit.write(conn, {**details, "run_id": repeat.run_id}, repeated=True)
            return repeat
    assert started.answer is not None
    return started.answer


def _lost_commit(started: FireResult, exc: Exception) -> None:
    # The workflow runs: "retry" would be false, and a keyless retry a second fire.
    log.error(
        "manual fire %s started, but its audit entry did not commit: %s",
        started.workflow_id,
        type(exc).__name__,
        extra={"workflow_id": started.workflow_id, "trigger_key": started.trigger_key},
    )


async def _earlier(
    temporal: TemporalClientProvider, refused: WorkflowAlreadyStartedError, trigger_key: str
) -> FireResult:
    """The fire Temporal refused to start again, as its first start answered it."""
    if refused.run_id:
        return FireResult(refused.workflow_id, refused.run_id, trigger_key)
    earlier = await _started(temporal, refused.workflow_id, trigger_key)
    if earlier is None:  # refused as started, then gone: only past its retention
        raise TemporalUnavailable(f"Temporal lost workflow {refused.workflow_id}; retry")
    return earlier


async def _started(
    temporal: TemporalClientProvider, workflow_id: str, trigger_key: str
) -> FireResult | None:
    """The fire `workflow_id` as its start answered it (its first run), None when Temporal
    has no such workflow."""
    described = await describe_workflow(temporal, workflow_id, refused="a describe")
    if described is None:
        return None
    run_id = described.raw_description.workflow_execution_info.first_run_id or described.run_id
    return FireResult(workflow_id, run_id, trigger_key)


async def retry_fire(
    pool: asyncpg.Pool,
    temporal: TemporalClientProvider,
    *,
    automation: str,
    fire: str,
    task_queue: str,
) -> FireResult:
    """Start one earlier fire of `automation` (its UUID or slug) again; `fire` is the
    fire's run id or UUID (see the module docstring).

    Raises AutomationNotFound, FireNotFound, AutomationPaused, DatabaseUnavailable or
    TemporalUnavailable.
    """
    with unavailable_on_loss():
        row = await _definition(pool, automation)
        if row is None:
            raise AutomationNotFound(f"no automation {automation!r}")
        earlier = await pool.fetchrow(queries.FIRE_TO_RETRY, row["id"], fire, uuid_or_none(fire))
    slug: str = row["slug"]
    if earlier is None:
        raise FireNotFound(f"automation {slug!r} has no fire {fire!r}")
    if row["paused"]:
        raise AutomationPaused(f"automation {slug!r} is paused; it does not fire")
    context = earlier["context"] if isinstance(earlier["context"], dict) else {}
    request = context.get("request")
    params = RunActivityInput(
        activity_slug=slug,
        trigger_key=earlier["trigger_key"],
        request=dict(request) if isinstance(request, dict) else None,
        retry_of=earlier["run_id"],
        triggering_event_id=earlier["triggering_event_id"],
        scheduled_for=earlier["scheduled_for"],
    )
    return await _start(
        temporal,
        params,
        workflow_id=f"activity:{slug}:retry:{uuid.uuid4()}",
        task_queue=task_queue,
    )


async def _start(
    temporal: TemporalClientProvider,
    params: RunActivityInput,
    *,
    workflow_id: str,
    task_queue: str,
) -> FireResult:
    handle = await start_workflow(
        temporal,
        WORKFLOW_NAME,
        params,
        workflow_id=workflow_id,
        task_queue=task_queue,
        result_type=RunActivityResult,
        # a fire's id names that fire only: never started again once it closed
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
    )
    run_id = handle.result_run_id or handle.first_execution_run_id or ""
    return FireResult(workflow_id=handle.id, run_id=run_id, trigger_key=params.trigger_key)
