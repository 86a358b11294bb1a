"""The claim queue endpoints (/ops-runs). Edge only: authenticate, parse, call the service.

Each route's first dependency checks the caller's credential (credentials.py), before
FastAPI looks at its path, query or body: reads take an operator or a viewer, actions an
operator (the operator plane's own endpoints are in routes_operator.py). The worker
endpoints' bodies are in worker_ops.py, shared with the fast path that answers valid
worker requests without the framework (worker_fast_path.py). These routes stay the
documented interface and answer everything the fast path hands on.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict

from activity_core.http import worker_ops
from activity_core.http.credentials import OPERATOR_CREDENTIAL, VIEWER_CREDENTIAL, WORKER_CREDENTIAL
from activity_core.http.deps import Acting, Actions, Queue, Worker
from activity_core.http.operator_context import REQUEST_ID_HEADER, request_id_of
from activity_core.http.refusals import ACTION_STATUSES, error_docs
from activity_core.queue.errors import QueueRefusal
from activity_core.queue.service import ListFilter
from ops_contracts import (
    TEXT_SCHEMA_PATTERN,
    ClaimRequest,
    ClaimResponse,
    CloseResponse,
    CompleteRequest,
    ExpireLeasesResponse,
    FailRequest,
    HeartbeatRequest,
    Instant,
    Label,
    OpsRun,
    Printable,
    RefusalCode,
    RunPage,
    RunState,
    WorkerId,
)

__all__ = ["router"]

router = APIRouter(prefix="/ops-runs", tags=["ops-runs"])


_DESCRIBED = {
    401: "unauthenticated: no or an invalid credential",
    403: "forbidden (wrong kind of credential, or a viewer asking for an action) or "
    "worker_identity_mismatch",
    404: "not_found",
    409: "wrong_owner, expired_lease (the lease ended, or `attempt` is not the run's "
    "current attempt), state_conflict, evidence_conflict or terminal_conflict",
}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return error_docs(*statuses, described=_DESCRIBED)


# the reads: an operator's or a viewer's, refused alike (404: a run, or the automation a
# filter names)
_READ_ROUTE: dict[str, Any] = {
    "responses": _errors(401, 403, 404, 422, 503),
    "dependencies": [VIEWER_CREDENTIAL],
}

# heartbeat, complete and fail: a worker's call on the run it holds, refused alike
_WORKER_RUN_ROUTE: dict[str, Any] = {
    "responses": _errors(*ACTION_STATUSES),
    "dependencies": [WORKER_CREDENTIAL],
}


class ExpireLeasesRequest(BaseModel):
    """expire-leases takes no fields: an empty body, `{}`, or none at all."""

    model_config = ConfigDict(extra="forbid")


@router.get("", operation_id="listRuns", response_model=RunPage, **_READ_ROUTE)
async def list_runs(
    queue: Queue,
    state: RunState | None = None,
    label: Annotated[list[Label] | None, Query(max_length=20)] = None,
    activity_definition_id: uuid.UUID | None = None,
    target_repo: Annotated[
        str | None, Query(min_length=1, max_length=256, pattern=TEXT_SCHEMA_PATTERN), Printable
    ] = None,
    automation: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=128,
            pattern=TEXT_SCHEMA_PATTERN,
            description="an automation's slug or UUID (404 when there is none)",
        ),
        Printable,
    ] = None,
    worker: Annotated[
        WorkerId | None,
        Query(description="the lease holder (claim_owner), or a terminal run's last one"),
    ] = None,
    created_after: Annotated[
        Instant | None,
        Query(description="runs created at or after this time (with a timezone)"),
    ] = None,
    created_before: Annotated[
        Instant | None,
        Query(description="runs created before this time (with a timezone)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> dict[str, Any]:
    """Runs newest first (keyset: pass `next_cursor` back as `cursor`), every filter
    optional and all of them combined: `created_after <= created_at < created_before`."""
    if created_after is not None and created_before is not None and created_after >= created_before:
        raise QueueRefusal(
            RefusalCode.invalid_request,
            "created_before must be later than created_after",
            loc=("query", "created_before"),
        )
    runs, next_cursor = await queue.list(
        ListFilter(
            state=state,
            labels=label,
            activity_definition_id=activity_definition_id,
            target_repo=target_repo,
            cursor=cursor,
            limit=limit,
            automation=automation,
            worker=worker,
            created_after=created_after,
            created_before=created_before,
        )
    )
    return {"runs": runs, "next_cursor": next_cursor}


@router.post(
    "/claim",
    operation_id="claimRuns",
    response_model=ClaimResponse,
    responses=_errors(401, 403, 413, 415, 422, 503),
    dependencies=[WORKER_CREDENTIAL],
)
async def claim(body: ClaimRequest, call: Worker) -> dict[str, Any]:
    return await worker_ops.claim(call, None, body)


@router.post(
    "/expire-leases",
    operation_id="expireLeases",
    response_model=ExpireLeasesResponse,
    responses=_errors(401, 403, 413, 415, 422, 503),
    dependencies=[OPERATOR_CREDENTIAL],
)
async def expire_leases(
    actions: Actions,
    actor: Acting,
    request: Request,
    response: Response,
    body: ExpireLeasesRequest | None = None,
) -> dict[str, int]:
    """Reopen every claim whose lease has ended (expire it at the attempt ceiling);
    recorded in the audit trail."""
    reopened, expired = await actions.expire_leases(actor)
    response.headers[REQUEST_ID_HEADER] = request_id_of(request)
    return {"reopened": reopened, "expired": expired}


@router.get("/{run_id}", operation_id="getRun", response_model=OpsRun, **_READ_ROUTE)
async def get_run(run_id: uuid.UUID, queue: Queue) -> dict[str, Any]:
    return await queue.get(run_id)


@router.post(
    "/{run_id}/heartbeat", operation_id="heartbeatRun", response_model=OpsRun, **_WORKER_RUN_ROUTE
)
async def heartbeat(run_id: uuid.UUID, body: HeartbeatRequest, call: Worker) -> dict[str, Any]:
    return await worker_ops.heartbeat(call, run_id, body)


@router.post(
    "/{run_id}/complete",
    operation_id="completeRun",
    response_model=CloseResponse,
    **_WORKER_RUN_ROUTE,
)
async def complete(run_id: uuid.UUID, body: CompleteRequest, call: Worker) -> dict[str, Any]:
    return await worker_ops.complete(call, run_id, body)


@router.post(
    "/{run_id}/fail", operation_id="failRun", response_model=CloseResponse, **_WORKER_RUN_ROUTE
)
async def fail(run_id: uuid.UUID, body: FailRequest, call: Worker) -> dict[str, Any]:
    return await worker_ops.fail(call, run_id, body)
