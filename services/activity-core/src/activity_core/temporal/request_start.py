"""Starting a workflow on behalf of an HTTP request (a manual fire, a publication).

- `start_then_commit`: the transaction that stays open across the start. The audit entry
  (and any row) is written first, as the intent, so a failed write means nothing started
  and a failed start rolls it back. Once the start answered, the answer is the request's
  whatever COMMIT does: a COMMIT lost after the start is handed to `lost_commit` (to log
  it), never raised as a 503 "retry" that would be false.
- `start_workflow` and `describe_workflow`: Temporal's answers that are not the request's
  fault (an RPC refused, a server that cannot be reached) as TemporalUnavailable; a
  workflow already started is raised as it is, for the caller to answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from temporalio.client import WorkflowExecutionDescription, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from activity_core.db.unavailable import pooled
from activity_core.temporal.client import TemporalClientProvider, is_unreachable
from activity_core.temporal.errors import TemporalUnavailable

__all__ = ["Started", "describe_workflow", "start_then_commit", "start_workflow"]

_T = TypeVar("_T")


@dataclass
class Started(Generic[_T]):
    """What the start answered, once it did (None before): from then on the answer."""

    answer: _T | None = None


@asynccontextmanager
async def start_then_commit(
    pool: asyncpg.Pool, *, lost_commit: Callable[[_T, Exception], None]
) -> AsyncIterator[tuple[PoolConnectionProxy[asyncpg.Record], Started[_T]]]:
    """A connection in a transaction, and the `Started` the body sets once its workflow
    started: an error before that is raised (nothing started), one after it goes to
    `lost_commit` with the answer (see the module docstring)."""
    started: Started[_T] = Started()
    try:
        async with pooled(pool) as conn, conn.transaction():
            yield conn, started
    except Exception as exc:
        if started.answer is None:
            raise
        lost_commit(started.answer, exc)


@contextmanager
def _temporal_unavailable(temporal: TemporalClientProvider, refused: str) -> Iterator[None]:
    try:
        yield
    except RPCError as exc:
        # unreachable, or refusing our namespace: either way not the request's fault
        raise TemporalUnavailable(
            f"Temporal at {temporal.address} refused {refused}: {exc.status.name}"
        ) from exc
    except RuntimeError as exc:
        if is_unreachable(exc):
            raise TemporalUnavailable(f"Temporal is not reachable at {temporal.address}") from exc
        raise


async def start_workflow(
    temporal: TemporalClientProvider,
    workflow: str,
    params: Any,
    *,
    workflow_id: str,
    task_queue: str,
    result_type: type[Any],
    id_reuse_policy: WorkflowIDReusePolicy,
) -> WorkflowHandle[Any, Any]:
    """Start `workflow`; raises WorkflowAlreadyStartedError (the id policy refused it) or
    TemporalUnavailable."""
    client = await temporal.get()
    with _temporal_unavailable(temporal, "the start"):
        return await client.start_workflow(
            workflow,
            params,
            id=workflow_id,
            task_queue=task_queue,
            result_type=result_type,
            id_reuse_policy=id_reuse_policy,
        )


async def describe_workflow(
    temporal: TemporalClientProvider, workflow_id: str, *, refused: str
) -> WorkflowExecutionDescription | None:
    """The workflow as Temporal describes it, None when it has no such workflow; a refusal
    is TemporalUnavailable naming the call as `refused` ("a describe")."""
    client = await temporal.get()
    with _temporal_unavailable(temporal, refused):
        try:
            return await client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
