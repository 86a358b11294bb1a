"""Run artefacts as JSON (/ops/automations): an automation's fires joined to their ops runs.

Edge only: authenticate an operator or a viewer (each route's first dependency, before its
path and query are looked at), parse, call the artefact service. No prompt, description, tool
output or model text is in any of these bodies (artefacts/models.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from activity_core.artefacts.models import AutomationIndex, FireDetail, FirePage
from activity_core.artefacts.service import MAX_PAGE_SIZE
from activity_core.http.credentials import VIEWER_CREDENTIAL
from activity_core.http.deps import Artefacts
from activity_core.http.refusals import error_docs
from ops_contracts import TEXT_SCHEMA_PATTERN, Printable

__all__ = ["router"]

router = APIRouter(prefix="/ops/automations", tags=["automations"])

_DESCRIBED = {
    401: "unauthenticated: no or an invalid operator credential",
    403: "forbidden: a worker credential",
    404: "not_found: no such automation, or no such run of it",
}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return error_docs(*statuses, described=_DESCRIBED)


AutomationId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=TEXT_SCHEMA_PATTERN,
        description="the automation's slug (its definition id) or its UUID",
    ),
    Printable,
]


@router.get(
    "",
    operation_id="listAutomations",
    response_model=AutomationIndex,
    responses=_errors(401, 403, 503),
    dependencies=[VIEWER_CREDENTIAL],
)
async def list_automations(artefacts: Artefacts) -> AutomationIndex:
    """Every automation with its schedule, pause flag, last fire and queue counts by state."""
    return await artefacts.automations()


# a read of one automation: refused alike
_ONE_AUTOMATION: dict[str, Any] = {
    "responses": _errors(401, 403, 404, 422, 503),
    "dependencies": [VIEWER_CREDENTIAL],
}


@router.get(
    "/{automation_id}/runs",
    operation_id="listAutomationFires",
    response_model=FirePage,
    **_ONE_AUTOMATION,
)
async def list_automation_runs(
    automation_id: AutomationId,
    artefacts: Artefacts,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 20,
    cursor: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> FirePage:
    """The automation's fires, newest first (keyset: pass `next_cursor` back as `cursor`),
    each with its ops runs, their compact evidence and their artefacts with Forgejo links."""
    return await artefacts.fires(automation_id, limit=limit, cursor=cursor)


@router.get(
    "/{automation_id}/runs/{run_id}",
    operation_id="getAutomationFire",
    response_model=FireDetail,
    **_ONE_AUTOMATION,
)
async def get_automation_run(
    automation_id: AutomationId,
    run_id: Annotated[
        str,
        Path(
            min_length=1,
            max_length=200,
            pattern=TEXT_SCHEMA_PATTERN,
            description="the fire's run id, or its UUID",
        ),
        Printable,
    ],
    artefacts: Artefacts,
) -> FireDetail:
    """One fire of the automation with its ops runs, evidence and artefacts."""
    return await artefacts.fire(automation_id, run_id)
