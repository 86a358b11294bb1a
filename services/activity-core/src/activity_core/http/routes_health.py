"""Liveness, readiness and metrics.

/metrics takes ACTIVITY_CORE_METRICS_TOKEN as a bearer token when it is set (401
`unauthenticated` otherwise; credentials.py, METRICS_CREDENTIAL). Unset, it is open to
whoever reaches the API's port: deploy/README.md says how to restrict it then.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.responses import Response

from activity_core.db.errors import SCHEMA_NOT_CURRENT_FAILURES
from activity_core.db.migrate import current_version, latest_version
from activity_core.http.credentials import METRICS_CREDENTIAL
from activity_core.http.deps import Queue
from activity_core.http.responses import error_response
from activity_core.queue.errors import DatabaseUnavailable
from ops_contracts import ErrorBody, RefusalCode

__all__ = ["router"]

router = APIRouter(tags=["operations"])

# No database, or no schema yet: /metrics still answers with the process's own counters.
_NO_COUNTS: tuple[type[BaseException], ...] = (DatabaseUnavailable, *SCHEMA_NOT_CURRENT_FAILURES)


class Readiness(BaseModel):
    status: Literal["ready"]
    schema_version: int


@router.get("/healthz", operation_id="getHealth")
async def healthz() -> dict[str, str]:
    """The process is up and serving; says nothing about its dependencies."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    operation_id="getReadiness",
    response_model=None,
    responses={
        200: {
            "model": Readiness,
            "description": "ready: the database answers, with this build's schema or a newer one",
        },
        503: {
            "model": ErrorBody,
            "description": "unavailable: the database cannot be reached; schema_not_current: "
            "its schema is older than this build's",
        },
    },
)
async def readyz(request: Request) -> Any:
    """Ready when the database answers and its schema is the one this build expects."""
    pool = request.app.state.pool
    try:
        async with pool.acquire(timeout=2) as conn:
            version = await conn.fetchval("SELECT 1") and await current_version(conn)
    except Exception as exc:  # any failure to reach the database means "not ready"
        return error_response(
            503, RefusalCode.unavailable, f"database not reachable ({type(exc).__name__})"
        )
    expected = latest_version()
    # Migrations are forward-only and backward-compatible, so pods of the previous release
    # stay ready after a newer release migrated; a schema older than this build is not ready.
    if version < expected:
        return error_response(
            503,
            RefusalCode.schema_not_current,
            f"schema version {version}, expected {expected} or newer",
        )
    return {"status": "ready", "schema_version": version}


@router.get("/metrics", include_in_schema=False, dependencies=[METRICS_CREDENTIAL])
async def metrics(request: Request, queue: Queue) -> Response:
    registry_owner = request.app.state.metrics
    try:
        counts = await queue.count_by_state()
    except _NO_COUNTS:
        counts = {}  # no database or no schema yet: the process's own counters still answer
    for state, n in counts.items():
        registry_owner.runs_by_state.labels(state=state).set(n)
    return Response(registry_owner.exposition(), media_type=CONTENT_TYPE_LATEST)
