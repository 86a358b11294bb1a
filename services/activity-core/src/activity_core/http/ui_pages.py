"""How every ops UI answer is made: the page around a template, the security headers, the
session cookie, and the page a refusal gets.

Every answer under /ops/ui is a page, whatever refuses the request: a route's own
refusal, FastAPI's validation of its path and query (error_handlers.py asks
`is_ui_request`), or a body that is not a form (the body guard hands /ops/ui on unread;
the form check words the 415).

Pages never run a script, so the Content-Security-Policy allows none; templates
autoescape every value. A route hands `answer` a function of the caller that renders its
page; `answer` finds the caller (ui_guard.py) and turns every refusal into an HTML page
with its status (a sign-in redirect, 403, 404, 409, 415, 429 with Retry-After, 503).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import Scope

from activity_core.http.ui_guard import (
    COOKIE_NAME,
    COOKIE_PATH,
    Form,
    UiCaller,
    UiRefusal,
    acting_caller,
    cookie_is_secure,
    ui_caller,
    unavailable,
)
from activity_core.operator.sessions import SESSION_LIFETIME
from activity_core.queue.errors import DatabaseUnavailable, QueueRefusal
from activity_core.temporal.errors import TemporalUnavailable
from activity_core.ui.render import render
from ops_contracts import REFUSAL_HTTP_STATUS, RefusalCode

__all__ = [
    "ANSWERED",
    "SECURITY_HEADERS",
    "answer",
    "answer_form",
    "as_refusal",
    "clear_session_cookie",
    "is_ui_request",
    "page",
    "redirect",
    "refusal_page",
    "secured",
    "set_session_cookie",
]

log = logging.getLogger("activity_core.http.ui")

# Where the ops UI lives (its routers' prefix, its cookie's path).
UI_PREFIX = COOKIE_PATH


def is_ui_request(scope: Scope) -> bool:
    """The request is for a page of the ops UI (below the app's root path, if any)."""
    path: str = scope.get("path", "")
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path + "/"):
        path = path[len(root_path) :]
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with
    # a form, and the UI could not tell its own forms from a sandboxed attacker's; other
    # sites (the artefact links) still get no referrer.
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


def secured(response: Response, *, cache: bool = False) -> Response:
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "private, max-age=300" if cache else "no-store"
    return response


def page(
    caller: UiCaller | None,
    template: str,
    *,
    status: int = 200,
    refresh_seconds: int | None = None,
    **context: object,
) -> Response:
    html = render(template, caller=caller, refresh_seconds=refresh_seconds, **context)
    return secured(Response(html, status_code=status, media_type="text/html; charset=utf-8"))


def redirect(location: str) -> Response:
    return secured(RedirectResponse(location, status_code=303))


def set_session_cookie(request: Request, response: Response, session_id: str) -> None:
    response.set_cookie(
        COOKIE_NAME,
        session_id,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=cookie_is_secure(request),
    )


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        COOKIE_NAME,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=cookie_is_secure(request),
    )


def refusal_page(request: Request, refusal: UiRefusal, caller: UiCaller | None = None) -> Response:
    if refusal.location is not None:
        response = redirect(refusal.location)
    else:
        response = page(
            caller,
            "message.html",
            status=refusal.status,
            heading=refusal.heading,
            detail=refusal.detail,
            code=refusal.code,
        )
    if refusal.retry_after is not None:
        response.headers["Retry-After"] = str(refusal.retry_after)
    if refusal.clear_cookie:
        clear_session_cookie(request, response)
    return response


def queue_refusal(exc: QueueRefusal) -> UiRefusal:
    heading = {
        RefusalCode.not_found: "Not found",
        RefusalCode.state_conflict: "Not possible now",
        RefusalCode.forbidden: "Forbidden",
    }.get(exc.code, "Refused")
    return UiRefusal(REFUSAL_HTTP_STATUS[exc.code], exc.code.value, heading, exc.detail)


# Everything a page or a form may raise that is answered as a page (nothing changed).
ANSWERED = (UiRefusal, QueueRefusal, DatabaseUnavailable, TemporalUnavailable)


def as_refusal(exc: Exception) -> UiRefusal:
    """The page an exception of ANSWERED is answered with."""
    if isinstance(exc, UiRefusal):
        return exc
    if isinstance(exc, QueueRefusal):
        return queue_refusal(exc)
    if isinstance(exc, TemporalUnavailable):
        log.warning("ops UI: Temporal unavailable: %s", exc)
        return UiRefusal(
            503,
            "unavailable",
            "Temporal unavailable",
            "Temporal cannot be reached right now; nothing was changed. Try again.",
        )
    return unavailable()


async def answer(request: Request, body: Callable[[UiCaller], Awaitable[Response]]) -> Response:
    """Find the caller, let `body` make the page, and answer every refusal as a page."""
    caller: UiCaller | None = None
    try:
        caller = await ui_caller(request)
        response = await body(caller)
    except ANSWERED as exc:
        return refusal_page(request, as_refusal(exc), caller)
    if caller.new_session_id is not None:
        set_session_cookie(request, response, caller.new_session_id)
    return response


async def answer_form(
    request: Request,
    action: str,
    target: str,
    body: Callable[[UiCaller, Form], Awaitable[Response]],
) -> Response:
    """Admit a form that acts (ui_guard.acting_caller: `action` on `target` is what a
    viewer's refused attempt is audited as), let `body` act, and answer every refusal as
    a page that changed nothing."""
    caller: UiCaller | None = None
    try:
        caller, form = await acting_caller(request, action=action, target=target)
        return await body(caller, form)
    except ANSWERED as exc:
        return refusal_page(request, as_refusal(exc), caller)
