"""The claim queue endpoints (/ops-runs). Edge only: authenticate, parse, call the service.

Each route's first dependency checks the caller's credential (credentials.py), before
FastAPI looks at its path, query or body. The worker endpoints' bodies are in
worker_ops.py, shared with the fast path that answers valid worker requests without the
framework (worker_fast_path.py). These routes stay the documented interface and answer
everything the fast path hands on.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict

from ops_contracts import (
    ClaimRequest,
    ClaimResponse,
    CloseResponse,
    CompleteRequest,
    ErrorBody,
    ExpireLeasesResponse,
    FailRequest,
    HeartbeatRequest,
    Label,
    OpsRun,
    RunPage,
    RunState,
)

from ..queue.service import ListFilter
from . import worker_ops
from .credentials import OPERATOR_CREDENTIAL, WORKER_CREDENTIAL
from .deps import Queue, Worker

router = APIRouter(prefix="/ops-runs", tags=["ops-runs"])


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    described = {
        401: "unauthenticated: no or an invalid credential",
        403: "forbidden (wrong kind of credential) or worker_identity_mismatch",
        404: "not_found",
        409: "wrong_owner, expired_lease (the lease ended, or `attempt` is not the run's "
        "current attempt), state_conflict, evidence_conflict or terminal_conflict",
        413: "request_too_large",
        422: "invalid_request, with an errors list naming each bad field",
        503: "unavailable: the database cannot be reached",
    }
    return {s: {"model": ErrorBody, "description": described[s]} for s in statuses}


_WORKER_ERRORS = _errors(401, 403, 404, 409, 413, 422, 503)
_OPERATOR_ERRORS = _errors(401, 403, 422, 503)

# PostgreSQL text cannot hold NUL; a filter value with control characters can match no run.
_PRINTABLE = r"^[^\x00-\x1f\x7f]+$"


class ExpireLeasesRequest(BaseModel):
    """expire-leases takes no fields: an empty body, `{}`, or none at all."""

    model_config = ConfigDict(extra="forbid")


@router.get(
    "", response_model=RunPage, responses=_OPERATOR_ERRORS, dependencies=[OPERATOR_CREDENTIAL]
)
async def list_runs(
    queue: Queue,
    state: RunState | None = None,
    label: Annotated[list[Label] | None, Query(max_length=20)] = None,
    activity_definition_id: uuid.UUID | None = None,
    target_repo: Annotated[
        str | None, Query(min_length=1, max_length=256, pattern=_PRINTABLE)
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> dict[str, Any]:
    runs, next_cursor = await queue.list(
        ListFilter(
            state=state,
            labels=label,
            activity_definition_id=activity_definition_id,
            target_repo=target_repo,
            cursor=cursor,
            limit=limit,
        )
    )
    return {"runs": runs, "next_cursor": next_cursor}


@router.post(
    "/claim",
    response_model=ClaimResponse,
    responses=_WORKER_ERRORS,
    dependencies=[WORKER_CREDENTIAL],
)
async def claim(body: ClaimRequest, call: Worker) -> dict[str, Any]:
    return await worker_ops.claim(call, None, body)


@router.post(
    "/expire-leases",
    response_model=ExpireLeasesResponse,
    responses=_errors(401, 403, 413, 422, 503),
    dependencies=[OPERATOR_CREDENTIAL],
)
async def expire_leases(queue: Queue, body: ExpireLeasesRequest | None = None) -> dict[str, int]:
    reopened, expired = await queue.expire_leases()
    return {"reopened": reopened, "expired": expired}


@router.get(
    "/{run_id}",
    response_model=OpsRun,
    responses=_errors(401, 403, 404, 422, 503),
    dependencies=[OPERATOR_CREDENTIAL],
)
async def get_run(run_id: uuid.UUID, queue: Queue) -> dict[str, Any]:
    return await queue.get(run_id)


@router.post(
    "/{run_id}/heartbeat",
    response_model=OpsRun,
    responses=_WORKER_ERRORS,
    dependencies=[WORKER_CREDENTIAL],
)
async def heartbeat(run_id: uuid.UUID, body: HeartbeatRequest, call: Worker) -> dict[str, Any]:
    return await worker_ops.heartbeat(call, run_id, body)


@router.post(
    "/{run_id}/complete",
    response_model=CloseResponse,
    responses=_WORKER_ERRORS,
    dependencies=[WORKER_CREDENTIAL],
)
async def complete(run_id: uuid.UUID, body: CompleteRequest, call: Worker) -> dict[str, Any]:
    return await worker_ops.complete(call, run_id, body)


@router.post(
    "/{run_id}/fail",
    response_model=CloseResponse,
    responses=_WORKER_ERRORS,
    dependencies=[WORKER_CREDENTIAL],
)
async def fail(run_id: uuid.UUID, body: FailRequest, call: Worker) -> dict[str, Any]:
    return await worker_ops.fail(call, run_id, body)
