"""The four worker operations (claim, heartbeat, complete, fail), once.

Each operation is the body of its endpoint: the authenticated worker's call, the run id
from the path (claim has none) and the validated body in; the answer the response model
describes out. Two doors lead here and must behave identically: the FastAPI routes in
routes_queue.py (the documented interface, and the one that words every 4xx for a
malformed request) and the fast path in worker_fast_path.py (valid requests only).
So the operations, their body and response models live in one table, WORKER_ENDPOINTS.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter

from activity_core.http.deps import WorkerCall
from activity_core.queue.claim import ClaimSpec
from ops_contracts import (
    ClaimRequest,
    ClaimResponse,
    CloseResponse,
    CompleteRequest,
    FailRequest,
    HeartbeatRequest,
    OpsRun,
)

__all__ = [
    "CLAIM",
    "COMPLETE",
    "FAIL",
    "HEARTBEAT",
    "RUN_ENDPOINTS",
    "WORKER_ENDPOINTS",
    "WorkerEndpoint",
    "claim",
    "complete",
    "fail",
    "heartbeat",
]


async def claim(call: WorkerCall, _: uuid.UUID | None, body: ClaimRequest) -> dict[str, Any]:
    worker_id = call.worker_id(body.worker_id)
    runs = await call.queue.claim(
        ClaimSpec(
            worker_id=worker_id,
            labels=body.labels,
            labels_mode=body.labels_mode,
            limit=body.limit,
            lease_seconds=body.lease_seconds or call.default_lease_seconds,
            wait_seconds=body.wait_seconds,
        )
    )
    return {"runs": runs}


async def heartbeat(
    call: WorkerCall, run_id: uuid.UUID | None, body: HeartbeatRequest
) -> dict[str, Any]:
    assert run_id is not None
    worker_id = call.worker_id(body.worker_id)
    lease_seconds = body.lease_seconds or call.default_lease_seconds
    return await call.queue.heartbeat(run_id, worker_id, lease_seconds, attempt=body.attempt)


async def complete(
    call: WorkerCall, run_id: uuid.UUID | None, body: CompleteRequest
) -> dict[str, Any]:
    assert run_id is not None
    worker_id = call.worker_id(body.worker_id)
    run, disposition = await call.queue.complete(
        run_id, worker_id, body.result, attempt=body.attempt
    )
    return {**run, "close_disposition": disposition}


async def fail(call: WorkerCall, run_id: uuid.UUID | None, body: FailRequest) -> dict[str, Any]:
    assert run_id is not None
    worker_id = call.worker_id(body.worker_id)
    run, disposition = await call.queue.fail(
        run_id,
        worker_id,
        body.error,
        reopen=body.reopen,
        raw_result=body.result,
        attempt=body.attempt,
    )
    return {**run, "close_disposition": disposition}


Operation = Callable[[WorkerCall, uuid.UUID | None, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class WorkerEndpoint:
    """One worker endpoint: `POST /ops-runs/claim` or `POST /ops-runs/{run_id}/<action>`."""

    action: str
    body_model: type[BaseModel]
    response_model: type[BaseModel]
    operate: Operation
    # What FastAPI prepares from a route's response_model, prepared once here.
    _response: TypeAdapter[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_response", TypeAdapter(self.response_model))

    @property
    def route(self) -> str:
        """The template of the route this endpoint answers for (its metrics label)."""
        return (
            "/ops-runs/claim" if self.action == "claim" else f"/ops-runs/{{run_id}}/{self.action}"
        )

    def response_json(self, content: dict[str, Any]) -> bytes:
        """The answer validated against the response model, as FastAPI serializes it.

        Raises pydantic.ValidationError when the content does not fit the model."""
        return self._response.dump_json(self._response.validate_python(content), by_alias=True)


CLAIM = WorkerEndpoint("claim", ClaimRequest, ClaimResponse, claim)
HEARTBEAT = WorkerEndpoint("heartbeat", HeartbeatRequest, OpsRun, heartbeat)
COMPLETE = WorkerEndpoint("complete", CompleteRequest, CloseResponse, complete)
FAIL = WorkerEndpoint("fail", FailRequest, CloseResponse, fail)

WORKER_ENDPOINTS: tuple[WorkerEndpoint, ...] = (CLAIM, HEARTBEAT, COMPLETE, FAIL)
# The run-scoped endpoints by the last segment of their path.
RUN_ENDPOINTS: dict[str, WorkerEndpoint] = {e.action: e for e in WORKER_ENDPOINTS if e is not CLAIM}
