"""The ops UI (/ops/ui): sign-in and sign-out, the automations and their fires.

Who may see a page and act through a form is ui_guard.py; how a page is answered,
ui_pages.py. The queue-wide views are routes_ui_runs.py, the forms that act
routes_ui_actions.py.

Sign-in takes an operator's name and token (the operator of ACTIVITY_CORE_OPERATOR_TOKEN
is named `operator`), from the UI's own origin only, and is throttled per client address
and per operator name (operator/sessions.py: 10 failures per client, 20 per name, in 15
minutes; then 429 with Retry-After). A failure says nothing of what was wrong.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from activity_core.http.auth import Authenticator, operator_name_ok
from activity_core.http.deps import Artefacts, Audit
from activity_core.http.operator_context import request_id_of
from activity_core.http.ui_guard import (
    COOKIE_NAME,
    UiCaller,
    UiRefusal,
    client_of,
    read_form,
    same_origin_refusal,
    ui_caller,
    unavailable,
)
from activity_core.http.ui_pages import (
    answer,
    clear_session_cookie,
    page,
    redirect,
    refusal_page,
    secured,
    set_session_cookie,
)
from activity_core.operator.audit import Actor, AuditLog, AuditRecord
from activity_core.operator.sessions import UiSessions, credential_binding
from activity_core.queue.errors import DatabaseUnavailable, QueueRefusal
from activity_core.temporal.pause import AutomationPauses
from activity_core.ui.render import stylesheet
from ops_contracts import AuditOutcome, Printable

__all__ = ["router"]

router = APIRouter(prefix="/ops/ui", include_in_schema=False)
log = logging.getLogger("activity_core.http.ui")

REFRESH_SECONDS = 10
_HOME = "/ops/ui/"

# The JSON API's rule for the same parameters (ops_contracts.params); a refusal is a page.
AutomationId = Annotated[str, Path(min_length=1, max_length=128), Printable]
RunId = Annotated[str, Path(min_length=1, max_length=200), Printable]


def safe_next(value: str | None) -> str:
    """Only a path inside the UI; anything else (another host, a scheme) goes home."""
    if not value or len(value) > 1000 or not value.startswith(_HOME):
        return _HOME
    if "\\" in value or "//" in value or any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        return _HOME
    parts = urllib.parse.urlsplit(value)
    if parts.scheme or parts.netloc or parts.fragment:
        return _HOME
    return value


def _auth(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.auth
    return auth


def _sessions(request: Request) -> UiSessions:
    sessions: UiSessions = request.app.state.ui_sessions
    return sessions


@router.get("/static/ops.css")
async def css() -> Response:
    return secured(Response(stylesheet(), media_type="text/css; charset=utf-8"), cache=True)


@router.get("/login")
async def login_form(
    request: Request, next: Annotated[str | None, Query(max_length=1000)] = None
) -> Response:
    target = safe_next(next)
    try:
        await ui_caller(request)
    except UiRefusal as refusal:
        if refusal.location is None:  # disabled, a worker's credential, no database
            return refusal_page(request, refusal)
        return page(None, "login.html", failed=False, next=target, name="")
    return redirect(target)  # signed in already (or an open operator plane)


@router.post("/login")
async def login(request: Request) -> Response:
    auth = _auth(request)
    try:
        form = await read_form(request)
        refusal = same_origin_refusal(request)
        if refusal is not None:
            raise refusal
        if not auth.operator_auth_configured:
            await ui_caller(request)  # disabled, or an open plane that needs no sign-in
            return redirect(_HOME)
        return await _sign_in(
            request,
            auth,
            _sessions(request),
            form.one("name") or "",
            form.one("token") or "",
            safe_next(form.one("next")),
        )
    except UiRefusal as refusal:
        return refusal_page(request, refusal)
    except DatabaseUnavailable:
        return refusal_page(request, unavailable())


async def _sign_in(
    request: Request,
    auth: Authenticator,
    sessions: UiSessions,
    name: str,
    token: str,
    target: str,
) -> Response:
    client = client_of(request)
    # a name that is no operator's is counted against the client only
    known = name if operator_name_ok(name) and auth.role_of(name) is not None else None
    # recorded and counted before the token is looked at (sessions.UiSessions.attempt)
    attempt = await sessions.attempt(client, known)
    wait = attempt.retry_after
    if wait is not None:
        log.warning("ops UI sign-in throttled for client %s (operator %s)", client, known)
        raise UiRefusal(
            429,
            "too_many_requests",
            "Too many sign-in attempts",
            f"Too many failed sign-ins; try again in {wait} seconds.",
            retry_after=wait,
        )
    try:
        principal = auth.sign_in(name, token) if known is not None and token else None
    except QueueRefusal:
        principal = None
    if principal is None:  # the attempt stays counted: a failure
        log.warning("ops UI sign-in failed from client %s", client)
        return page(None, "login.html", status=401, failed=True, next=target, name=name[:100])
    await sessions.forget(attempt)
    assert principal.name is not None and principal.role is not None
    digest = auth.credential_digest(principal.name)
    assert digest is not None
    session_id, _ = await sessions.open(principal.name, credential_binding(digest), client)
    audit: AuditLog = request.app.state.audit
    await audit.record(
        Actor(principal.name, principal.role, request_id_of(request)),
        AuditRecord("ui.sign-in", "ui", AuditOutcome.applied, details={"client": client}),
    )
    response = redirect(target)
    set_session_cookie(request, response, session_id)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Sign out: this session ends on the server (its cookie is worthless wherever it
    is). `everywhere=1` ends every session of the operator. From the UI's origin only;
    ending another session than one's own takes its CSRF token."""
    response = redirect("/ops/ui/login")
    try:
        form = await read_form(request)
        refusal = same_origin_refusal(request)
        if refusal is not None:
            raise refusal
        sessions = _sessions(request)
        session = await sessions.find(request.cookies.get(COOKIE_NAME))
        if session is not None:
            if form.one("csrf_token") != session.csrf_token:
                raise UiRefusal(
                    403,
                    "forbidden",
                    "Refused: the form is not this session's",
                    "The form's CSRF token is missing or does not belong to this session.",
                )
            if form.one("everywhere") == "1":
                ended = await sessions.close_all(session.operator)
                log.info("ops UI: %s signed out everywhere (%d sessions)", session.operator, ended)
            else:
                await sessions.close(request.cookies.get(COOKIE_NAME))
    except UiRefusal as refusal:
        return refusal_page(request, refusal)
    except DatabaseUnavailable:
        return refusal_page(request, unavailable())
    clear_session_cookie(request, response)
    return response


@router.get("/")
async def index(request: Request, artefacts: Artefacts) -> Response:
    async def body(caller: UiCaller) -> Response:
        return page(caller, "index.html", index=await artefacts.automations())

    return await answer(request, body)


@router.get("/automations/{automation_id}")
async def automation(
    request: Request,
    automation_id: AutomationId,
    artefacts: Artefacts,
    audit: Audit,
    cursor: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> Response:
    async def body(caller: UiCaller) -> Response:
        fires = await artefacts.fires(automation_id, limit=20, cursor=cursor)
        # paused or active, and the next fire times from the Temporal Schedule itself
        pauses = AutomationPauses(request.app.state.pool, request.app.state.temporal)
        pause = await pauses.state(automation_id)
        entries, _ = await audit.page(
            target=f"automation:{pause.slug}", actor=None, action=None, before=None, limit=20
        )
        return page(
            caller, "automation.html", page=fires, cursor=cursor, pause=pause, audit=entries
        )

    return await answer(request, body)


@router.get("/automations/{automation_id}/runs/{run_id}")
async def run_detail(
    request: Request, automation_id: AutomationId, run_id: RunId, artefacts: Artefacts
) -> Response:
    async def body(caller: UiCaller) -> Response:
        detail = await artefacts.fire(automation_id, run_id)
        return page(
            caller,
            "run.html",
            detail=detail,
            refresh_seconds=REFRESH_SECONDS if detail.run.open else None,
        )

    return await answer(request, body)
