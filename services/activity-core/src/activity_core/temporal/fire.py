"""Manual fire: start `RunActivityWorkflow` for one automation with an operator's request
context and a unique trigger key (`manual:{uuid4}`), so every manual fire is its own
triggering event and its own ops_runs."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg
from temporalio.service import RPCError

from ..queue.errors import DatabaseUnavailable
from . import queries
from .client import TemporalClientProvider, is_unreachable
from .errors import AutomationNotFound, AutomationPaused, TemporalUnavailable
from .payloads import (
    EXECUTION_TIMEOUT,
    MANUAL_TRIGGER_PREFIX,
    WORKFLOW_NAME,
    RunActivityInput,
    RunActivityResult,
)

# Failures that mean "the database is not there right now", not "the request is bad".
_DB_UNAVAILABLE = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
)


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
    try:
        row = await _definition(pool, automation)
    except _DB_UNAVAILABLE as exc:
        raise DatabaseUnavailable(type(exc).__name__) from exc
    if row is None:
        raise AutomationNotFound(f"no automation {automation!r}")
    slug: str = row["slug"]
    if row["paused"]:
        raise AutomationPaused(f"automation {slug!r} is paused; it does not fire")
    client = await temporal.get()
    trigger_key = manual_trigger_key()
    try:
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            RunActivityInput(activity_slug=slug, trigger_key=trigger_key, request=request),
            id=f"activity:{slug}:{trigger_key}",
            task_queue=task_queue,
            execution_timeout=EXECUTION_TIMEOUT,
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
    return FireResult(workflow_id=handle.id, run_id=run_id, trigger_key=trigger_key)
