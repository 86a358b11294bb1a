"""The operator plane's endpoints. Edge only: authenticate, parse, call a service.

Actions (OPERATOR_CREDENTIAL: an operator; a viewer is refused 403 and that is audited):
- `POST /ops-runs/{run_id}/requeue`: a failed or expired run gets a new open successor
  (201); the same `Idempotency-Key` again answers the same successor (200). Without the
  header the run itself is the key: a run has at most one keyless successor.
- `POST /ops-runs/requeue` `{"run_ids": [...]}` (at most 100): each run as above, each
  its own outcome.
- `POST /ops-runs/{run_id}/cancel` `{"reason"}`: an open or claimed run is failed.

Reads (VIEWER_CREDENTIAL: an operator or a viewer): explain, the runs summary, the dead
letter, the workers, the audit trail. Every answer of an action carries `X-Request-Id`.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from activity_core.http.credentials import OPERATOR_CREDENTIAL, VIEWER_CREDENTIAL
from activity_core.http.deps import Acting, Actions, Audit, Views
from activity_core.http.idempotency import idempotency_key_header
from activity_core.http.operator_context import REQUEST_ID_HEADER
from activity_core.http.refusals import ACTION_STATUSES, error_docs, refusal_outcome
from activity_core.operator.audit import MAX_PAGE_SIZE as MAX_AUDIT_PAGE
from activity_core.operator.audit import MAX_TARGET_LENGTH, Actor
from activity_core.operator.views import MAX_DEAD_LETTER_PAGE
from ops_contracts import (
    TEXT_SCHEMA_PATTERN,
    AuditPage,
    CancelRequest,
    CloseDisposition,
    CloseResponse,
    DeadLetterPage,
    ExplainResponse,
    Instant,
    OpsRun,
    Printable,
    RequeueManyRequest,
    RequeueManyResponse,
    RunsSummary,
    WorkersResponse,
)

__all__ = ["errors_of", "router", "runs_router"]

runs_router = APIRouter(prefix="/ops-runs", tags=["operator"])
router = APIRouter(prefix="/ops", tags=["operator"])

_DESCRIBED = {
    401: "unauthenticated: no or an invalid credential",
    403: "forbidden: a worker credential, or a viewer asking for an action",
    404: "not_found",
    409: "state_conflict",
}


def _errors(*statuses: int, **described: str) -> dict[int | str, dict[str, Any]]:
    own = {int(k.removeprefix("s")): v for k, v in described.items()}
    return error_docs(*statuses, described={**_DESCRIBED, **own})


# The operator plane's documented errors, for its other routers (routes_changes.py).
errors_of = _errors


IdempotencyKey = Annotated[
    str | None,
    idempotency_key_header(
        "Identifies this requeue: the same key again answers the successor it made "
        "(200). Absent: the run itself is the key (one keyless successor per run)."
    ),
]
AutomationFilter = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=128,
        pattern=TEXT_SCHEMA_PATTERN,
        description="an automation's slug or UUID (404 when there is none)",
    ),
    Printable,
]


def _request_id(actor: Actor, response: Response) -> None:
    # the acting operator's request id is the request's (operator_context.actor_of)
    response.headers[REQUEST_ID_HEADER] = actor.request_id


# -- actions --------------------------------------------------------------------------------


@runs_router.post(
    "/requeue",
    operation_id="requeueRuns",
    response_model=RequeueManyResponse,
    responses=_errors(401, 403, 413, 415, 422, 503),
    dependencies=[OPERATOR_CREDENTIAL],
)
async def requeue_runs(
    body: RequeueManyRequest,
    actor: Acting,
    actions: Actions,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Requeue up to 100 runs, each on its own (its own transaction and audit entry):
    each outcome has the status the single-run endpoint would have answered (201 a new
    successor, 200 the one this key made before, else the refusal's status, code and
    detail). The `Idempotency-Key` applies to each run."""
    results = await actions.requeue_many(actor, body.run_ids, idempotency_key)
    _request_id(actor, response)
    return {
        "results": [
            {
                "run_id": result.run_id,
                "status": 201 if result.created else 200,
                "successor": result.successor,
            }
            if result.refusal is None
            else {"run_id": result.run_id, **refusal_outcome(result.refusal)}
            for result in results
        ]
    }


@runs_router.post(
    "/{run_id}/requeue",
    operation_id="requeueRun",
    status_code=201,
    response_model=OpsRun,
    responses={
        200: {"model": OpsRun, "description": "the successor this Idempotency-Key made before"},
        **_errors(
            *ACTION_STATUSES,
            s409="state_conflict: the run is not failed or expired (the detail says what it is)",
        ),
    },
    dependencies=[OPERATOR_CREDENTIAL],
)
async def requeue_run(
    run_id: uuid.UUID,
    actor: Acting,
    actions: Actions,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """A new open run that copies what this failed or expired run was (definition, task,
    repository, labels, priority, profile, approach hint, grant, execution refs, source
    and trigger), at attempt 0, with `requeued_from` naming this run; this run is never
    changed (its `requeued_as` lists its successors). 201 with the successor; 200 with the
    same successor for a repeat with the same `Idempotency-Key`."""
    successor, created = await actions.requeue(actor, run_id, idempotency_key)
    response.status_code = 201 if created else 200
    _request_id(actor, response)
    return successor


@runs_router.post(
    "/{run_id}/cancel",
    operation_id="cancelRun",
    response_model=CloseResponse,
    responses=_errors(
        *ACTION_STATUSES,
        s409="state_conflict: the run is already succeeded, failed or expired",
    ),
    dependencies=[OPERATOR_CREDENTIAL],
)
async def cancel_run(
    run_id: uuid.UUID,
    body: CancelRequest,
    actor: Acting,
    actions: Actions,
    response: Response,
) -> dict[str, Any]:
    """Stop an open or claimed run: it is `failed` (`close_disposition` `applied`), its
    lease and owner cleared, `cancelled_by` the operator, `last_error` who cancelled it,
    from whom and why. The worker that held it is refused its next heartbeat
    (state_conflict) and abandons the run; any close of it is terminal_conflict. A reason
    that shows nothing (only spaces, control or invisible characters) is a 422."""
    run = await actions.cancel(actor, run_id, body.reason)
    _request_id(actor, response)
    return {**run, "close_disposition": CloseDisposition.applied}


# -- reads ----------------------------------------------------------------------------------


@runs_router.get(
    "/{run_id}/explain",
    operation_id="explainRun",
    response_model=ExplainResponse,
    responses=_errors(401, 403, 404, 422, 503),
    dependencies=[VIEWER_CREDENTIAL],
)
async def explain_run(run_id: uuid.UUID, views: Views) -> dict[str, Any]:
    """Why the run is where it is, most telling first. Codes: open runs
    `no_matching_worker`, `matching_workers_busy`, `matching_workers`, `next_in_line`,
    `queued_behind`, `last_attempt`, `attempt_ceiling_reached`, `retried`; claimed runs
    `claimed`, `lease_ended`, `last_attempt`; terminal runs `succeeded`, `failed`,
    `expired`, `cancelled`, `requeue_possible`; any run `requeued_as`, `requeued_from`,
    `automation_paused`, `automation_removed`. A worker counts as claiming when it
    claimed within the last 60 s or holds a live lease."""
    state, reasons = await views.explain(run_id)
    return {
        "run_id": run_id,
        "state": state,
        "reasons": [{"code": r.code, "detail": r.detail} for r in reasons],
    }


@router.get(
    "/runs/summary",
    operation_id="getRunsSummary",
    response_model=RunsSummary,
    responses=_errors(401, 403, 422, 503),
    dependencies=[VIEWER_CREDENTIAL],
)
async def runs_summary(
    views: Views,
    since: Annotated[
        Instant | None,
        Query(
            description="terminal counts are of runs created at or after this time "
            "(default: 24 h ago); open and claimed counts are always of the whole queue"
        ),
    ] = None,
) -> dict[str, Any]:
    """The queue at a glance: open, claimed and stalled (claimed, lease ended) runs, the
    oldest open run and its age, and succeeded, failed and expired runs of a window."""
    return await views.summary(since)


@router.get(
    "/runs/dead-letter",
    operation_id="listDeadLetterRuns",
    response_model=DeadLetterPage,
    responses=_errors(401, 403, 404, 422, 503, s404="not_found: no such automation"),
    dependencies=[VIEWER_CREDENTIAL],
)
async def dead_letter(
    views: Views,
    automation: AutomationFilter = None,
    requeued: Annotated[
        bool | None,
        Query(description="true: only runs requeued already; false: only the others"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_DEAD_LETTER_PAGE)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> dict[str, Any]:
    """Failed and expired runs, newest first (keyset: pass `next_cursor` back as
    `cursor`), each with its error, its compact execution evidence and its requeues."""
    runs, next_cursor = await views.dead_letter(
        automation=automation, requeued=requeued, cursor=cursor, limit=limit
    )
    return {"runs": runs, "next_cursor": next_cursor}


@router.get(
    "/workers",
    operation_id="listWorkers",
    response_model=WorkersResponse,
    responses=_errors(401, 403, 503),
    dependencies=[VIEWER_CREDENTIAL],
)
async def workers(views: Views) -> dict[str, Any]:
    """Every worker identity the claims recorded or that holds a run, latest claim first:
    its last claim (when, label filter, labels mode, limit), the runs it holds, and its
    state: `alive` (claimed within 60 s, or holds a run under a lease that has not ended),
    `idle` (else claimed within 15 min), `gone` (else). Claims are recorded by each API
    process every 2 s, so another replica's last claim shows up that much later."""
    return {"workers": await views.workers()}


@router.get(
    "/audit",
    operation_id="listAuditEntries",
    response_model=AuditPage,
    responses=_errors(401, 403, 422, 503),
    dependencies=[VIEWER_CREDENTIAL],
)
async def audit_trail(
    audit: Audit,
    target: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_TARGET_LENGTH,
            pattern=TEXT_SCHEMA_PATTERN,
            description="e.g. ops_run:<uuid>, automation:<slug>, queue",
        ),
        Printable,
    ] = None,
    run_id: Annotated[
        uuid.UUID | None, Query(description="shorthand for target=ops_run:<run_id>")
    ] = None,
    actor: Annotated[
        str | None, Query(min_length=1, max_length=100, pattern=TEXT_SCHEMA_PATTERN), Printable
    ] = None,
    action: Annotated[
        str | None, Query(min_length=1, max_length=100, pattern=TEXT_SCHEMA_PATTERN), Printable
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_PAGE)] = 50,
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$")] = None,
) -> dict[str, Any]:
    """Operator actions and refusals of actions, newest first (keyset: pass `next_cursor`
    back as `cursor`): who, role, what, target, when, request id, outcome (`applied`,
    `repeated`, `refused` with its code), details."""
    if run_id is not None:
        run_target = f"ops_run:{run_id}"
        if target is not None and target != run_target:
            return {"entries": [], "next_cursor": None}
        target = run_target
    entries, before = await audit.page(
        target=target,
        actor=actor,
        action=action,
        before=int(cursor) if cursor is not None else None,
        limit=limit,
    )
    return {"entries": entries, "next_cursor": str(before) if before is not None else None}
