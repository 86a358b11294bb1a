"""The ops UI's queue-wide views: runs (filtered, keyset pages, counts at the top), one
run (its explanation, its changes, its audit trail and what may be done to it; its
changes' patch and bundle as downloads under the session, whose cookie never opens the
JSON API), the dead letter
(failed and expired runs, requeued one by one or as a selection) and the workers.

Reads only; the forms on these pages post to routes_ui_actions.py. Every query value is
checked before it reaches the database (ui/run_filters.py): a bad one is shown next to
its field, never a 422 body or a 500.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from activity_core.http.deps import Audit, Changes, Queue, Views
from activity_core.http.routes_changes import bundle_response, patch_response
from activity_core.http.ui_guard import UiCaller
from activity_core.http.ui_pages import answer, page, secured
from activity_core.operator.changes import StoredChanges
from activity_core.queue.errors import QueueRefusal
from activity_core.ui.changes_display import file_displays
from activity_core.ui.run_filters import parse_run_filters
from ops_contracts import RunState, text_error

__all__ = ["router"]

router = APIRouter(prefix="/ops/ui", include_in_schema=False)

RUNS_PAGE = 50
DEAD_LETTER_PAGE = 50
REFRESH_SECONDS = 10
# What a redirect after an action may announce on the page it lands on.
DONE_NOTES = {
    "requeued": "Requeued: this is the new run.",
    "cancelled": "Cancelled: the run is failed; its worker stops at its next heartbeat.",
    "repeated": "This run was requeued before: this is the run that request made.",
    "publishing": "Publication asked for: its state is below.",
}

RunRef = Annotated[str, Path(min_length=1, max_length=200)]


def _params(request: Request) -> dict[str, str]:
    # the last value of a repeated parameter, as the form sends each field once
    return dict(request.query_params)


@router.get("/runs")
async def runs(request: Request, queue: Queue, views: Views) -> Response:
    filters = parse_run_filters(_params(request))

    async def body(caller: UiCaller) -> Response:
        summary = await views.summary()
        found: list[dict[str, Any]] = []
        next_cursor = None
        if not filters.errors:
            found, next_cursor = await queue.list(filters.list_filter(RUNS_PAGE))
        return page(
            caller,
            "runs.html",
            summary=summary,
            filters=filters,
            runs=found,
            next_query=filters.query(cursor=next_cursor) if next_cursor else None,
            states=[s.value for s in RunState],
        )

    return await answer(request, body)


def _no_such_run(caller: UiCaller) -> Response:
    return page(
        caller,
        "message.html",
        status=404,
        heading="Not found",
        detail="No ops run has this id.",
        code="not_found",
    )


async def _changes_context(changes: Changes, run_id: uuid.UUID) -> dict[str, Any]:
    """The Changes section's values: the view, or why it cannot be shown (the rest of the
    page is shown either way)."""
    stored = await changes.stored(run_id)
    if stored is None:
        return {"changes": None, "change_files": [], "changes_error": None}
    try:
        view = await changes.view_of(stored)
    except QueueRefusal as exc:
        return {"changes": None, "change_files": [], "changes_error": exc.detail}
    return {"changes": view, "change_files": file_displays(view), "changes_error": None}


@router.get("/runs/{run_id}")
async def run_page(
    request: Request, run_id: RunRef, queue: Queue, views: Views, audit: Audit, changes: Changes
) -> Response:
    done = DONE_NOTES.get(request.query_params.get("done", ""))

    async def body(caller: UiCaller) -> Response:
        try:
            parsed = uuid.UUID(run_id)
        except ValueError:
            return _no_such_run(caller)
        run = await queue.get(parsed)
        state, reasons = await views.explain(parsed)
        entries, _ = await audit.page(target=f"ops_run:{parsed}", limit=50)
        live = state in (RunState.open, RunState.claimed)
        return page(
            caller,
            "ops_run.html",
            run=run,
            reasons=reasons,
            audit=entries,
            done=done,
            refresh_seconds=REFRESH_SECONDS if live else None,
            **await _changes_context(changes, parsed),
        )

    return await answer(request, body)


async def _download(
    request: Request,
    run_id: str,
    changes: Changes,
    make: Callable[[StoredChanges], Awaitable[Response]],
) -> Response:
    async def body(caller: UiCaller) -> Response:
        try:
            parsed = uuid.UUID(run_id)
        except ValueError:
            return _no_such_run(caller)
        return secured(await make(await changes.require(parsed)))

    return await answer(request, body)


@router.get("/runs/{run_id}/changes.patch")
async def changes_patch(request: Request, run_id: RunRef, changes: Changes) -> Response:
    async def make(stored: StoredChanges) -> Response:
        return patch_response(stored, await changes.patch_of(stored))

    return await _download(request, run_id, changes, make)


@router.get("/runs/{run_id}/changes.bundle")
async def changes_bundle(request: Request, run_id: RunRef, changes: Changes) -> Response:
    async def make(stored: StoredChanges) -> Response:
        return bundle_response(stored)

    return await _download(request, run_id, changes, make)


def _dead_letter_filters(params: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    values = {k: params[k].strip() for k in ("automation", "requeued") if params.get(k, "").strip()}
    errors: dict[str, str] = {}
    automation = values.get("automation")
    if automation is not None and text_error(automation, 128) is not None:
        errors["automation"] = "an automation's id: at most 128 printable characters"
    if values.get("requeued") not in (None, "yes", "no"):
        errors["requeued"] = "yes, no or any"
    return values, errors


@router.get("/dead-letter")
async def dead_letter(request: Request, views: Views) -> Response:
    params = _params(request)
    values, errors = _dead_letter_filters(params)
    cursor = params.get("cursor") or None
    if cursor is not None and len(cursor) > 200:
        errors["cursor"] = "not a page of this view"

    async def body(caller: UiCaller) -> Response:
        found: list[dict[str, Any]] = []
        next_cursor = None
        if not errors:
            requeued = {"yes": True, "no": False}.get(values.get("requeued", ""))
            found, next_cursor = await views.dead_letter(
                automation=values.get("automation"),
                requeued=requeued,
                cursor=cursor,
                limit=DEAD_LETTER_PAGE,
            )
        return page(
            caller,
            "dead_letter.html",
            runs=found,
            values=values,
            errors=errors,
            next_query={**values, "cursor": next_cursor} if next_cursor else None,
        )

    return await answer(request, body)


@router.get("/workers")
async def workers(request: Request, views: Views) -> Response:
    async def body(caller: UiCaller) -> Response:
        return page(caller, "workers.html", workers=await views.workers())

    return await answer(request, body)
