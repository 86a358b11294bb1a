"""An operator's pause and resume of an automation, and its state (/ops/automations/{id}).

- `POST /ops/automations/{automation_id}/pause` `{"reason"?}` and `/resume` (operator):
  200 with the automation as below, a repeat included (unchanged). Audited as
  `automation.pause` / `automation.resume` on `automation:<slug>` however addressed
  (`repeated` for a repeat), refusals included; the entry commits with the change or not
  at all (temporal/pause.py), so a 503 means nothing changed.
- `GET /ops/automations/{automation_id}` (operator or viewer): the same view.

Edge only: authenticate (each route's first dependency, before path and body), parse, call
the pause service (temporal/pause.py), which says what a pause does to the database and to
the Temporal Schedule, and how a later sync-definitions keeps it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from activity_core.http.credentials import OPERATOR_CREDENTIAL, VIEWER_CREDENTIAL
from activity_core.http.deps import Acting, Audit
from activity_core.http.operator_context import REQUEST_ID_HEADER
from activity_core.http.refusals import ACTION_STATUSES, error_docs
from activity_core.operator.audit import Actor, AuditedAction, AuditLog, audit_target
from activity_core.temporal.pause import (
    MAX_REASON_LENGTH,
    AutomationPauses,
    AutomationState,
    ScheduleStatus,
)
from ops_contracts import ErrorBody

__all__ = ["router"]

router = APIRouter(prefix="/ops/automations", tags=["automations"])

AutomationId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="the automation's slug (its definition id) or its UUID",
    ),
]


class PauseRequest(BaseModel):
    """Why the operator pauses it (optional): kept sanitized, on one line, in the
    database and in the Temporal Schedule's note."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, min_length=1, max_length=MAX_REASON_LENGTH)

    @field_validator("reason")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        return value


class AutomationPauseView(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: uuid.UUID
    slug: str
    title: str
    cron: str | None = Field(description="absent: fired manually only")
    timezone: str | None
    paused: bool = Field(
        description="it does not fire: paused by an operator, or by its definition file"
    )
    paused_by: str | None = Field(description="the operator who paused it; null otherwise")
    paused_at: datetime | None
    reason: str | None = Field(description="the operator's reason, sanitized")
    paused_by_definition: bool = Field(
        description="its definition file says `paused: true`, or it was removed from the "
        "files: only a changed file and a sync lift that"
    )
    schedule: ScheduleStatus | None = Field(
        description="the Temporal Schedule's own state: active, paused, absent (Temporal has "
        "none yet: the next sync creates it), unreachable (GET only); null: manual only"
    )
    next_fire_times: list[datetime] = Field(
        description="the Temporal Schedule's next action times; empty while paused"
    )


def _view(state: AutomationState) -> AutomationPauseView:
    return AutomationPauseView(
        id=state.id,
        slug=state.slug,
        title=state.title,
        cron=state.cron,
        timezone=state.timezone,
        paused=state.paused,
        paused_by=state.paused_by,
        paused_at=state.paused_at,
        reason=state.reason,
        paused_by_definition=state.paused_by_definition,
        schedule=state.schedule,
        next_fire_times=state.next_fire_times,
    )


async def _pauses(request: Request) -> AutomationPauses:
    return AutomationPauses(request.app.state.pool, request.app.state.temporal)


Pauses = Annotated[AutomationPauses, Depends(_pauses)]

_DESCRIBED = {
    401: "unauthenticated: no or an invalid operator credential",
    403: "forbidden: a worker credential, or a viewer asking for an action",
    404: "not_found: no such automation",
    409: "state_conflict: the automation has no schedule (fired manually only; a resume "
    "still lifts an operator's pause of it); for a resume, also one its definition file "
    "pauses or that was removed from the files",
    503: "unavailable: Temporal or the database cannot be reached (or a definition sync "
    "held the schedules for too long); nothing changed, retry. schema_not_current: the "
    "database is not migrated for this build",
}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return error_docs(*statuses, described=_DESCRIBED)


@router.get(
    "/{automation_id}",
    operation_id="getAutomation",
    response_model=AutomationPauseView,
    responses={
        **_errors(401, 403, 404, 422),
        503: {
            "model": ErrorBody,
            "description": "unavailable: the database is down; schema_not_current: it is not "
            "migrated for this build",
        },
    },
    dependencies=[VIEWER_CREDENTIAL],
)
async def get_automation(automation_id: AutomationId, pauses: Pauses) -> AutomationPauseView:
    """The automation's pause and its Temporal Schedule's next fire times (a Temporal
    that cannot be reached shows as `schedule: unreachable` with no fire times)."""
    return _view(await pauses.state(automation_id))


@dataclass(frozen=True)
class _PauseCall:
    """What a pause and a resume both need besides the path and body, as one dependency."""

    pauses: AutomationPauses
    actor: Actor
    audit: AuditLog
    response: Response

    async def audited(
        self,
        action: str,
        automation_id: str,
        change: Callable[[AuditedAction], Awaitable[AutomationState]],
    ) -> AutomationPauseView:
        """The change, audited as `action` on the automation (its entry commits with the
        change or not at all), answered with the request id."""
        target = audit_target("automation", automation_id)
        async with self.audit.action(self.actor, action, target) as act:
            state = await change(act)
        # the acting operator's request id is the request's (operator_context.actor_of)
        self.response.headers[REQUEST_ID_HEADER] = self.actor.request_id
        return _view(state)


async def _pause_call(
    pauses: Pauses, actor: Acting, audit: Audit, response: Response
) -> _PauseCall:
    return _PauseCall(pauses, actor, audit, response)


PauseCall = Annotated[_PauseCall, Depends(_pause_call)]

# pause and resume are documented and guarded alike
_ACTION_ROUTE: dict[str, Any] = {
    "response_model": AutomationPauseView,
    "responses": _errors(*ACTION_STATUSES),
    "dependencies": [OPERATOR_CREDENTIAL],
}


@router.post("/{automation_id}/pause", operation_id="pauseAutomation", **_ACTION_ROUTE)
async def pause_automation(
    automation_id: AutomationId,
    call: PauseCall,
    body: Annotated[PauseRequest | None, Body()] = None,
) -> AutomationPauseView:
    """Pause the automation: its Temporal Schedule is paused with a note naming the
    operator, and the database keeps who, when and why. A later sync-definitions keeps it
    paused (a changed cron is applied to the paused schedule); only a resume lifts it. The
    same pause again answers 200 unchanged (the first pause's operator, time and reason)."""
    reason = body.reason if body is not None else None
    return await call.audited(
        "automation.pause",
        automation_id,
        lambda act: call.pauses.pause(
            automation_id, operator=call.actor.name, reason=reason, audit=act
        ),
    )


@router.post("/{automation_id}/resume", operation_id="resumeAutomation", **_ACTION_ROUTE)
async def resume_automation(automation_id: AutomationId, call: PauseCall) -> AutomationPauseView:
    """Resume an automation an operator paused: its Temporal Schedule is unpaused and its
    next fire times follow the current cron. An active automation answers 200 unchanged.
    One its definition file pauses (or that was removed from the files) is refused 409:
    change the file and sync. An operator's pause of an automation whose definition has
    dropped its schedule since is lifted too (the row alone; it fires manually again)."""
    return await call.audited(
        "automation.resume",
        automation_id,
        lambda act: call.pauses.resume(automation_id, operator=call.actor.name, audit=act),
    )
