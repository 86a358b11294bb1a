"""`POST /ops-runs/{run_id}/publish` (operator): publish a succeeded run's changes.

Edge only: authenticate (a viewer is refused 403, audited as `publish`), call
temporal/publication_start.py, answer the run's publication. The push itself is
PublishChangesWorkflow's, on activity-core's Temporal worker.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Response

from activity_core.http.credentials import OPERATOR_CREDENTIAL
from activity_core.http.deps import Acting, Audit, Database, Settings, Temporal
from activity_core.http.operator_context import REQUEST_ID_HEADER, request_id_of
from activity_core.http.refusals import ACTION_STATUSES, error_docs
from activity_core.operator.audit import audit_target
from activity_core.temporal.publication_start import request_publication
from ops_contracts import PublishResponse

__all__ = ["router"]

router = APIRouter(prefix="/ops-runs", tags=["operator"])


_ERRORS: dict[int | str, dict[str, Any]] = {
    200: {
        "model": PublishResponse,
        "description": "a repeat: the run's publication is pending or published already; "
        "nothing started",
    },
    **error_docs(
        *ACTION_STATUSES,
        described={
            401: "unauthenticated",
            403: "forbidden: not an operator credential (a worker's, or a viewer's: audited)",
            404: "not_found: no such run",
            409: "state_conflict: the run is not succeeded, has no stored changes for "
            "its attempt, or Temporal still runs an earlier publication of it",
            422: "invalid_request: the run id is not a UUID",
            503: "unavailable: Temporal or the database is down; nothing started, ask "
            "again. schema_not_current: the database is not migrated for this build",
        },
    ),
}


@router.post(
    "/{run_id}/publish",
    operation_id="publishRun",
    status_code=202,
    response_model=PublishResponse,
    responses=_ERRORS,
    dependencies=[OPERATOR_CREDENTIAL],
)
async def publish_run(
    run_id: uuid.UUID,
    settings: Settings,
    pool: Database,
    temporal: Temporal,
    actor: Acting,
    audit: Audit,
    request: Request,
    response: Response,
) -> dict[str, Any]:
    """Publish the run's changes: PublishChangesWorkflow re-checks the stored bundle
    against the run (tip = head_after, from the baseline, within the grant), pushes
    `refs/heads/rein/<run>/<attempt>` create-only to ACTIVITY_CORE_REPOSITORY_URL and,
    when Forgejo is configured, opens a pull request against the default branch. 202
    `pending` when this request started it; 200 with the publication as it is when it is
    pending or published already (nothing starts); a failed one starts again (202).
    Audited (`publish` on `ops_run:<id>`, `repeated` for a repeat), refusals included;
    the entry is written before the start, so a 503 means nothing started."""
    target = audit_target("ops_run", run_id)
    async with audit.action(actor, "publish", target) as act:
        answer = await request_publication(
            pool,
            temporal,
            run_id=run_id,
            requested_by=actor.name,
            task_queue=settings.temporal_task_queue,
            audit=act,
        )
    response.status_code = 202 if answer.started else 200
    response.headers[REQUEST_ID_HEADER] = request_id_of(request)
    return {"run_id": answer.run_id, "publication": answer.publication}
