"""The ops UI (/ops/ui): server-rendered pages over the run-artefact service.

Every page needs an operator: the bearer (or X-Operator-Token) header, or the signed
session cookie the login form sets (http/session.py). Without one a page redirects to
the login form; with no operator token configured the pages are open only under
ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1 and refused otherwise. Pages never run a
script, so the Content-Security-Policy allows none; templates autoescape every value.
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import RedirectResponse, Response

from ops_contracts import REFUSAL_HTTP_STATUS, RefusalCode

from ..queue.errors import DatabaseUnavailable, QueueRefusal
from ..temporal.pause import AutomationPauses
from ..ui.render import render, stylesheet
from .auth import Authenticator
from .deps import Artefacts, Auth, OperatorToken
from .session import COOKIE_NAME, COOKIE_PATH, SessionSigner

router = APIRouter(prefix="/ops/ui", include_in_schema=False)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
REFRESH_SECONDS = 10
_MAX_FORM_BYTES = 8192
_HOME = "/ops/ui/"

AutomationId = Annotated[str, Path(min_length=1, max_length=128)]
RunId = Annotated[str, Path(min_length=1, max_length=200)]


def _secured(response: Response, *, cache: bool = False) -> Response:
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "private, max-age=300" if cache else "no-store"
    return response


def _sessions(request: Request) -> SessionSigner | None:
    sessions: SessionSigner | None = getattr(request.app.state, "sessions", None)
    return sessions


def _signed_in(request: Request) -> bool:
    sessions = _sessions(request)
    return sessions is not None and sessions.verify(request.cookies.get(COOKIE_NAME))


def _page(
    request: Request,
    template: str,
    *,
    status: int = 200,
    refresh_seconds: int | None = None,
    **context: object,
) -> Response:
    html = render(
        template,
        signed_in=_signed_in(request),
        refresh_seconds=refresh_seconds,
        **context,
    )
    return _secured(Response(html, status_code=status, media_type="text/html; charset=utf-8"))


def _message(request: Request, status: int, heading: str, detail: str, code: str) -> Response:
    return _page(request, "message.html", status=status, heading=heading, detail=detail, code=code)


def _redirect(location: str) -> Response:
    return _secured(RedirectResponse(location, status_code=303))


def _safe_next(value: str | None) -> str:
    """Only a path inside the UI; anything else (another host, a scheme) goes home."""
    if not value or len(value) > 1000 or not value.startswith(_HOME):
        return _HOME
    if "\\" in value or "//" in value or any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        return _HOME
    parts = urllib.parse.urlsplit(value)
    if parts.scheme or parts.netloc or parts.fragment:
        return _HOME
    return value


def _disabled(request: Request) -> Response:
    return _message(
        request,
        403,
        "The ops UI is disabled",
        "No operator token is configured (ACTIVITY_CORE_OPERATOR_TOKEN), and open local "
        "access (ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1) is not enabled.",
        "unauthenticated",
    )


def _gate(request: Request, auth: Authenticator, token: str | None) -> Response | None:
    """None when the caller may see pages; else the response that turns them away."""
    try:
        auth.require_operator(token)
    except QueueRefusal as refusal:
        if not auth.operator_auth_configured:
            return _disabled(request)
        if refusal.code is RefusalCode.forbidden:
            return _message(
                request, 403, "Not an operator", "Sign in with the operator token.", "forbidden"
            )
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return _redirect("/ops/ui/login?" + urllib.parse.urlencode({"next": _safe_next(here)}))
    return None


def _refused(request: Request, exc: QueueRefusal | DatabaseUnavailable) -> Response:
    if isinstance(exc, DatabaseUnavailable):
        return _message(
            request,
            503,
            "Database unavailable",
            "The database cannot be reached right now; this page will work again when it is.",
            "unavailable",
        )
    status = REFUSAL_HTTP_STATUS[exc.code]
    heading = "Not found" if exc.code is RefusalCode.not_found else "Cannot show this page"
    return _message(request, status, heading, exc.detail, exc.code.value)


@router.get("/static/ops.css")
async def css() -> Response:
    return _secured(Response(stylesheet(), media_type="text/css; charset=utf-8"), cache=True)


@router.get("/login")
async def login_form(
    request: Request,
    auth: Auth,
    token: OperatorToken,
    next: Annotated[str | None, Query(max_length=1000)] = None,
) -> Response:
    if not auth.operator_auth_configured:
        return _redirect(_HOME) if _gate(request, auth, None) is None else _disabled(request)
    if _gate(request, auth, token) is None:
        return _redirect(_safe_next(next))
    return _page(request, "login.html", failed=False, next=_safe_next(next))


@router.post("/login")
async def login(request: Request, auth: Auth) -> Response:
    sessions = _sessions(request)
    if sessions is None:
        return _redirect(_HOME) if _gate(request, auth, None) is None else _disabled(request)
    form = await _form(request)
    presented = form.get("token")
    target = _safe_next(form.get("next"))
    try:
        auth.require_operator(presented or None)
    except QueueRefusal:
        # No reason is given: not whether the token was malformed, a worker's, or wrong.
        return _page(request, "login.html", status=401, failed=True, next=target)
    response = _redirect(target)
    response.set_cookie(
        COOKIE_NAME,
        sessions.issue(),
        max_age=sessions.lifetime_seconds,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    response = _redirect("/ops/ui/login")
    response.delete_cookie(
        COOKIE_NAME,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded login form, bounded; anything else is an empty form."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        return {}
    body = await request.body()
    if len(body) > _MAX_FORM_BYTES:
        return {}
    try:
        pairs = urllib.parse.parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, max_num_fields=8
        )
    except (UnicodeDecodeError, ValueError):
        return {}
    return {key: value for key, value in pairs if key in ("token", "next")}


@router.get("/")
async def index(
    request: Request, auth: Auth, token: OperatorToken, artefacts: Artefacts
) -> Response:
    if (denied := _gate(request, auth, token)) is not None:
        return denied
    try:
        automations = await artefacts.automations()
    except (QueueRefusal, DatabaseUnavailable) as exc:
        return _refused(request, exc)
    return _page(request, "index.html", index=automations)


@router.get("/automations/{automation_id}")
async def automation(
    request: Request,
    automation_id: AutomationId,
    auth: Auth,
    token: OperatorToken,
    artefacts: Artefacts,
    cursor: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> Response:
    if (denied := _gate(request, auth, token)) is not None:
        return denied
    try:
        page = await artefacts.fires(automation_id, limit=20, cursor=cursor)
        # paused or active, and the next fire times from the Temporal Schedule itself
        pause = await AutomationPauses(request.app.state.pool, request.app.state.temporal).state(
            automation_id
        )
    except (QueueRefusal, DatabaseUnavailable) as exc:
        return _refused(request, exc)
    return _page(request, "automation.html", page=page, cursor=cursor, pause=pause)


@router.get("/automations/{automation_id}/runs/{run_id}")
async def run_detail(
    request: Request,
    automation_id: AutomationId,
    run_id: RunId,
    auth: Auth,
    token: OperatorToken,
    artefacts: Artefacts,
) -> Response:
    if (denied := _gate(request, auth, token)) is not None:
        return denied
    try:
        detail = await artefacts.fire(automation_id, run_id)
    except (QueueRefusal, DatabaseUnavailable) as exc:
        return _refused(request, exc)
    return _page(
        request,
        "run.html",
        detail=detail,
        refresh_seconds=REFRESH_SECONDS if detail.run.open else None,
    )
