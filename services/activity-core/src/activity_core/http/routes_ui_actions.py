"""The ops UI's forms that act: requeue, cancel and publish a run, requeue a selection of
the dead letter (or everything its filter matches, bounded), pause and resume an
automation.

Each is a POST that ui_guard.acting_caller admits (a form, from the UI's origin, within
a session, with the session's CSRF token, by an operator; a viewer's attempt is audited)
and then calls the same service the JSON API calls, as the same named operator: the
audit trail cannot tell the two doors apart, except by the request id. A refused form
changes nothing. After an action the browser is sent (303) to the page that shows its
result, so a reload does not post again.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from activity_core.http.deps import Actions, Audit, Views
from activity_core.http.ui_guard import Form, UiCaller, UiRefusal
from activity_core.http.ui_pages import answer_form, page, redirect
from activity_core.operator.actions import RequeueResult
from activity_core.operator.audit import AuditLog, audit_target
from activity_core.temporal.pause import MAX_REASON_LENGTH, AutomationPauses
from activity_core.temporal.publication_start import request_publication
from ops_contracts import REFUSAL_HTTP_STATUS, cancel_reason_error, text_error

__all__ = ["router"]

router = APIRouter(prefix="/ops/ui", include_in_schema=False)

# A selection of the dead letter, or what its filter matches, is requeued 100 at most at
# a time (the JSON API's bulk bound).
MAX_BULK = 100

RunRef = Annotated[str, Path(min_length=1, max_length=200)]
AutomationRef = Annotated[str, Path(min_length=1, max_length=128)]
_AUTOMATION_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _run_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise UiRefusal(404, "not_found", "Not found", "No ops run has this id.") from None


@router.post("/runs/{run_id}/requeue")
async def requeue_run(request: Request, run_id: RunRef, actions: Actions) -> Response:
    async def do(caller: UiCaller, form: Form) -> Response:
        parsed = _run_id(run_id)
        # no Idempotency-Key: the run itself is the key, so a form posted twice (a
        # double click, a resent request) finds the successor the first one made
        successor, created = await actions.requeue(caller.actor(request), parsed, None)
        done = "requeued" if created else "repeated"
        return redirect(f"/ops/ui/runs/{successor['id']}?done={done}")

    return await answer_form(request, "requeue", audit_target("ops_run", run_id), do)


@router.post("/runs/{run_id}/cancel")
async def cancel_run(request: Request, run_id: RunRef, actions: Actions) -> Response:
    async def do(caller: UiCaller, form: Form) -> Response:
        parsed = _run_id(run_id)
        reason = (form.one("reason") or "").strip()
        error = cancel_reason_error(reason)  # the JSON body's rule
        if error is not None:
            raise UiRefusal(
                422,
                "invalid_request",
                "A reason is needed",
                f"Say why the run is cancelled: the reason {error}; nothing was changed.",
            )
        await actions.cancel(caller.actor(request), parsed, reason)
        return redirect(f"/ops/ui/runs/{parsed}?done=cancelled")

    return await answer_form(request, "cancel", audit_target("ops_run", run_id), do)


@router.post("/runs/{run_id}/publish")
async def publish_run(request: Request, run_id: RunRef, audit: Audit) -> Response:
    """The run page's Publish form: the same service as POST /ops-runs/{id}/publish."""
    target = audit_target("ops_run", run_id)

    async def do(caller: UiCaller, form: Form) -> Response:
        parsed = _run_id(run_id)
        actor = caller.actor(request)
        settings = request.app.state.settings
        async with audit.action(actor, "publish", target) as act:
            await request_publication(
                request.app.state.pool,
                request.app.state.temporal,
                run_id=parsed,
                requested_by=actor.name,
                task_queue=settings.temporal_task_queue,
                audit=act,
            )
        return redirect(f"/ops/ui/runs/{parsed}?done=publishing#publication")

    return await answer_form(request, "publish", target, do)


@router.post("/dead-letter/requeue")
async def requeue_selection(request: Request, actions: Actions, views: Views) -> Response:
    """`run_id` (repeated): the selection; `one`: the row whose own button was pressed;
    `matching=1` with the view's `automation` filter: every failed or expired run of it
    not requeued yet, newest first, 100 at most."""

    async def do(caller: UiCaller, form: Form) -> Response:
        texts: list[str]
        if one := form.one("one"):
            texts = [one]
        elif form.one("matching") == "1":
            automation = (form.one("automation") or "").strip() or None
            if automation is not None and text_error(automation, 128) is not None:
                raise UiRefusal(
                    422, "invalid_request", "Not an automation", "The filter is not valid."
                )
            matched, _ = await views.dead_letter(
                automation=automation, requeued=False, cursor=None, limit=MAX_BULK
            )
            texts = [str(run["id"]) for run in matched]
        else:
            texts = form.all("run_id")
        if not texts:
            raise UiRefusal(
                422, "invalid_request", "Nothing selected", "Select the runs to requeue."
            )
        if len(texts) > MAX_BULK:
            raise UiRefusal(
                422,
                "invalid_request",
                "Too many runs",
                f"Requeue at most {MAX_BULK} runs at a time; nothing was changed.",
            )
        ids = [_run_id(text) for text in texts]
        results = await actions.requeue_many(caller.actor(request), ids, None)
        return page(caller, "requeue_results.html", results=[_outcome(r) for r in results])

    return await answer_form(request, "requeue", "queue", do)


def _outcome(result: RequeueResult) -> dict[str, Any]:
    if result.refusal is not None:
        return {
            "run_id": result.run_id,
            "status": REFUSAL_HTTP_STATUS[result.refusal.code],
            "code": result.refusal.code.value,
            "detail": result.refusal.detail,
            "successor": None,
        }
    return {
        "run_id": result.run_id,
        "status": 201 if result.created else 200,
        "code": None,
        "detail": "requeued" if result.created else "requeued before",
        "successor": result.successor["id"] if result.successor else None,
    }


async def _pause_or_resume(
    request: Request, automation_id: str, audit: AuditLog, *, pause: bool
) -> Response:
    action = "automation.pause" if pause else "automation.resume"
    target = audit_target("automation", automation_id)

    async def do(caller: UiCaller, form: Form) -> Response:
        if not _AUTOMATION_ID.fullmatch(automation_id):
            raise UiRefusal(404, "not_found", "Not found", "No automation has this id.")
        pauses = AutomationPauses(request.app.state.pool, request.app.state.temporal)
        reason = (form.one("reason") or "").strip() or None
        if reason is not None and len(reason) > MAX_REASON_LENGTH:
            raise UiRefusal(
                422,
                "invalid_request",
                "Reason too long",
                f"At most {MAX_REASON_LENGTH} characters; nothing was changed.",
            )
        actor = caller.actor(request)
        async with audit.action(actor, action, target) as act:
            if pause:
                state = await pauses.pause(
                    automation_id, operator=actor.name, reason=reason, audit=act
                )
            else:
                state = await pauses.resume(automation_id, operator=actor.name, audit=act)
        return redirect(f"/ops/ui/automations/{state.slug}")

    return await answer_form(request, action, target, do)


@router.post("/automations/{automation_id}/pause")
async def pause_automation(
    request: Request, automation_id: AutomationRef, audit: Audit
) -> Response:
    return await _pause_or_resume(request, automation_id, audit, pause=True)


@router.post("/automations/{automation_id}/resume")
async def resume_automation(
    request: Request, automation_id: AutomationRef, audit: Audit
) -> Response:
    return await _pause_or_resume(request, automation_id, audit, pause=False)
