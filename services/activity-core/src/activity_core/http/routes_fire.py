"""Manual fire of an automation (operator): POST /ops/automations/{id}/fire.

The body is the request context the definition's templates see as `context.request.*`.
Edge only: authenticate (the route's first dependency, before the body is looked at),
parse, call the fire service (temporal/fire.py: the optional Idempotency-Key and the
audit entry written before the start).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path
from pydantic import BaseModel, ConfigDict, Field, field_validator

from activity_core.http.credentials import OPERATOR_CREDENTIAL
from activity_core.http.deps import Acting, Audit, Database, Settings, Temporal
from activity_core.http.idempotency import idempotency_key_header
from activity_core.http.refusals import ACTION_STATUSES, error_docs
from activity_core.operator.audit import audit_target
from activity_core.temporal.errors import AutomationNotFound, AutomationPaused
from activity_core.temporal.fire import fire_manual
from ops_contracts import RefusalCode, canonical_json

__all__ = ["router"]

router = APIRouter(prefix="/ops/automations", tags=["automations"])

MAX_PARAMS_BYTES = 16_384
# PostgreSQL text and jsonb cannot hold NUL; control characters have no place in a ref.
_REF = r"^[^\x00-\x1f\x7f]+$"
Ref = Annotated[str, Field(min_length=1, max_length=512, pattern=_REF)]
RefList = Annotated[list[Ref], Field(max_length=50)]


class FireRequest(BaseModel):
    """A manual fire's request context. Unknown top-level fields are refused; free-form
    values go under `params` (a JSON object of at most 16 KiB)."""

    model_config = ConfigDict(extra="forbid")

    correlation_id: Ref | None = None
    causation_id: Ref | None = None
    goal_ref: Ref | None = None
    goal_refs: RefList | None = None
    initiative_refs: RefList | None = None
    request_ref: Ref | None = None
    params: dict[str, Any] | None = Field(
        default=None, description="free-form JSON object, at most 16 KiB, no NUL characters"
    )

    @field_validator("params")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        encoded = canonical_json(value)
        if len(encoded) > MAX_PARAMS_BYTES:
            raise ValueError(f"must be at most {MAX_PARAMS_BYTES} bytes as JSON")
        if _has_nul(value):
            raise ValueError("must not contain NUL characters")
        return value

    def context(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


def _has_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str) and "\x00" in node:
            return True
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


class FireResponse(BaseModel):
    workflow_id: str
    run_id: str
    trigger_key: str


# The refusals of a fire the audit trail records (an outage is not a refusal).
_AUDITED_REFUSALS = {
    AutomationNotFound: RefusalCode.not_found,
    AutomationPaused: RefusalCode.state_conflict,
}

IdempotencyKey = Annotated[
    str | None,
    idempotency_key_header(
        "Identifies this fire: the same key again (for this automation) starts nothing "
        "and answers the first fire's workflow, run and trigger key. Absent: every "
        "request is a new fire."
    ),
]
_ERRORS = error_docs(
    *ACTION_STATUSES,
    described={
        401: "unauthenticated",
        403: "forbidden: not an operator credential (a worker's, or a viewer's)",
        404: "not_found: no such automation",
        409: "state_conflict: the automation is paused",
        422: "invalid_request, with an errors list (a bad body or Idempotency-Key)",
        503: "unavailable: Temporal or the database is down; nothing started, "
        "retry (with the same Idempotency-Key, it fires once whatever happened). "
        "schema_not_current: the database is not migrated for this build",
    },
)


@router.post(
    "/{automation_id}/fire",
    operation_id="fireAutomation",
    status_code=202,
    response_model=FireResponse,
    responses=_ERRORS,
    dependencies=[OPERATOR_CREDENTIAL],
)
async def fire(
    automation_id: Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")],
    settings: Settings,
    pool: Database,
    temporal: Temporal,
    actor: Acting,
    audit: Audit,
    body: Annotated[FireRequest | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, str]:
    """Start RunActivityWorkflow for this automation (its UUID or slug) with the body as
    the request context; answers the workflow and run id. With an `Idempotency-Key` the
    same key again starts nothing and answers the first fire's ids (202 as well), so a
    retry after a lost answer or a 503 fires once. Recorded in the audit trail (`fire` on
    `automation:<slug>`, `repeated` for a repeat), refusals included; the entry is written
    before the start, so a 503 means nothing started."""
    target = audit_target("automation", automation_id)
    async with audit.action(actor, "fire", target, refusals=_AUDITED_REFUSALS) as act:
        result = await fire_manual(
            pool,
            temporal,
            automation=automation_id,
            request=(body or FireRequest()).context(),
            task_queue=settings.temporal_task_queue,
            idempotency_key=idempotency_key,
            audit=act,
        )
    return {
        "workflow_id": result.workflow_id,
        "run_id": result.run_id,
        "trigger_key": result.trigger_key,
    }
