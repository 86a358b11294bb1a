"""Manual fire and retry: start `RunActivityWorkflow` for one automation.

- `fire_manual`: an operator's request context and a unique trigger key (`manual:{uuid4}`),
  so every manual fire is its own triggering event and its own ops_runs.
- `retry_fire`: one earlier fire again, with its trigger key, triggering event, scheduled
  time and request context, so it has the same idempotency keys: the ops runs it emitted
  are found (`duplicate`), the ones it did not are created, and the IssueSink writes it
  left pending or failed are sent again. For a fire that failed (once its cause is
  fixed) or whose sink writes failed; retrying any other fire changes nothing.

Neither sets an execution timeout: a fire waits for a worker however long it takes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg
from temporalio.service import RPCError

from activity_core.db.unavailable import unavailable_on_loss
from activity_core.temporal import queries
from activity_core.temporal.client import TemporalClientProvider, is_unreachable
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

__all__ = ["FireResult", "fire_manual", "manual_trigger_key", "retry_fire"]


@dataclass(frozen=True)
class FireResult:
    workflow_id: str
    run_id: str
    trigger_key: str


def manual_trigger_key() -> str:
    return f"{MANUAL_TRIGGER_PREFIX}{uuid.uuid4()}"


async def _definition(pool: asyncpg.Pool, automation: str) -> asyncpg.Record | None:
    try:
        by_id = uuid.UUID(automation)
    except ValueError:
        return await pool.fetchrow(queries.DEFINITION_BY_SLUG, automation)
    return await pool.fetchrow(queries.DEFINITION_BY_ID, by_id)


async def fire_manual(
    pool: asyncpg.Pool,
    temporal: TemporalClientProvider,
    *,
    automation: str,
    request: dict[str, Any],
    task_queue: str,
) -> FireResult:
    """`automation` is the definition's UUID or its slug.

    Raises AutomationNotFound, AutomationPaused, DatabaseUnavailable or TemporalUnavailable.
    """
    with unavailable_on_loss():
        row = await _definition(pool, automation)
    if row is None:
        raise AutomationNotFound(f"no automation {automation!r}")
    slug: str = row["slug"]
    if row["paused"]:
        raise AutomationPaused(f"automation {slug!r} is paused; it does not fire")
    trigger_key = manual_trigger_key()
    return await _start(
        temporal,
        RunActivityInput(activity_slug=slug, trigger_key=trigger_key, request=request),
        workflow_id=f"activity:{slug}:{trigger_key}",
        task_queue=task_queue,
    )


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
        earlier = await pool.fetchrow(queries.FIRE_TO_RETRY, row["id"], fire, _as_uuid(fire))
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


def _as_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


async def _start(
    temporal: TemporalClientProvider,
    params: RunActivityInput,
    *,
    workflow_id: str,
    task_queue: str,
) -> FireResult:
    client = await temporal.get()
    try:
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            params,
            id=workflow_id,
            task_queue=task_queue,
            result_type=RunActivityResult,
        )
    except RPCError as exc:
        # unreachable, or refusing our namespace: either way not the request's fault
        raise TemporalUnavailable(
            f"Temporal at {temporal.address} refused the start: {exc.status.name}"
        ) from exc
    except RuntimeError as exc:
        if is_unreachable(exc):
            raise TemporalUnavailable(f"Temporal is not reachable at {temporal.address}") from exc
        raise
    run_id = handle.result_run_id or handle.first_execution_run_id or ""
    return FireResult(workflow_id=handle.id, run_id=run_id, trigger_key=params.trigger_key)
