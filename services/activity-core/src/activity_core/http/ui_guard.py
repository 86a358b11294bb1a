"""Who is at the ops UI, and whether a form they send may act.

A page is opened by

- an operator-plane credential in a header (Authorization: Bearer, X-Operator-Token):
  scripts and tests read pages this way; such a caller has no session and gets no forms;
- the session cookie the sign-in form sets (`ops_session`, path /ops/ui, HttpOnly,
  SameSite=Strict, Secure when the public URL is https): a server-side session
  (operator/sessions.py) that is valid while its row lives and its operator still has the
  credential it signed in with; its role is read from the running configuration, so a
  demoted operator is a viewer at the next request;
- nobody, on an open operator plane (local development: no operator credential,
  ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1): the first page opens a session for the
  operator `anonymous`, so its forms carry a CSRF token like everyone else's.

A form that acts (every POST under /ops/ui) is taken only when all of these hold, and
changes nothing otherwise:

1. its content type is the one a form sends (application/x-www-form-urlencoded): 415;
2. it comes from the UI's own origin: `Origin`, when sent, is the public URL's origin
   (ACTIVITY_CORE_PUBLIC_URL, else the origin the request was addressed to), and
   `Sec-Fetch-Site`, when sent, is `same-origin`: 403;
3. it is sent within a session (a header credential is for the JSON API): 403;
4. it carries the session's CSRF token (`csrf_token`): 403;
5. the session's operator has the role `operator`: a viewer is refused 403, audited.
"""

from __future__ import annotations

import hmac
import urllib.parse
from dataclasses import dataclass, field

from fastapi import Request

from activity_core.http.auth import ANONYMOUS_OPERATOR_NAME, Authenticator
from activity_core.http.deps import operator_token_of
from activity_core.http.operator_context import request_id_of
from activity_core.operator.audit import Actor, AuditLog
from activity_core.operator.sessions import UiSession, UiSessions, credential_binding
from activity_core.queue.errors import DatabaseUnavailable, QueueRefusal
from activity_core.settings import ActivityCoreSettings
from ops_contracts import OperatorRole, RefusalCode

__all__ = [
    "COOKIE_NAME",
    "COOKIE_PATH",
    "FORM_CONTENT_TYPE",
    "OPEN_BINDING",
    "Form",
    "UiCaller",
    "UiRefusal",
    "acting_caller",
    "client_of",
    "cookie_is_secure",
    "read_form",
    "same_origin_refusal",
    "session_role",
    "sign_in_location",
    "ui_caller",
    "unavailable",
]

COOKIE_NAME = "ops_session"
COOKIE_PATH = "/ops/ui"
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
# The credential binding of an open operator plane's anonymous sessions.
OPEN_BINDING = "open"
MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 250


@dataclass(frozen=True)
class UiRefusal(Exception):
    """Why a page or a form is turned away: the HTML answer's status, code and text."""

    status: int
    code: str
    heading: str
    detail: str
    # 303 to the sign-in form instead of a page (location), or a Retry-After (429)
    location: str | None = None
    retry_after: int | None = None
    clear_cookie: bool = False


@dataclass(frozen=True)
class UiCaller:
    name: str
    role: OperatorRole
    session: UiSession | None = None
    # a new session's id, for the cookie this answer sets (an open plane's first page)
    new_session_id: str | None = None

    @property
    def can_act(self) -> bool:
        """Its pages show action forms: an operator in a session (forms need its token)."""
        return self.session is not None and self.role is OperatorRole.operator

    @property
    def csrf_token(self) -> str:
        return self.session.csrf_token if self.session is not None else ""

    def actor(self, request: Request) -> Actor:
        return Actor(self.name, self.role, request_id_of(request))


@dataclass(frozen=True)
class Form:
    """A urlencoded form's fields; a field may repeat (the dead letter's selection)."""

    fields: dict[str, list[str]] = field(default_factory=dict)

    def one(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        return list(self.fields.get(name, ()))


def client_of(request: Request) -> str:
    """The client's address: the TCP peer's, or, from a proxy ACTIVITY_CORE_TRUSTED_PROXIES
    lists, the one its X-Forwarded-For names (serve.uvicorn_config)."""
    return request.client.host if request.client is not None else "unknown"


def _settings(request: Request) -> ActivityCoreSettings:
    settings: ActivityCoreSettings = request.app.state.settings
    return settings


def _origin(request: Request) -> str:
    public = _settings(request).public_url
    if public is not None:
        parts = urllib.parse.urlsplit(public)
        return f"{parts.scheme}://{parts.netloc}".lower()
    return f"{request.url.scheme}://{request.url.netloc}".lower()


def cookie_is_secure(request: Request) -> bool:
    """Secure when operators reach the service over https: the public URL says so (a TLS
    proxy in front), or this request came in over https."""
    public = _settings(request).public_url
    return (public is not None and public.startswith("https://")) or request.url.scheme == "https"


def same_origin_refusal(request: Request) -> UiRefusal | None:
    """Refuse a form posted from another site: `Origin` (when the browser sends it) must
    be the UI's own, `Sec-Fetch-Site` (likewise) must be same-origin. A client that sends
    neither (not a browser) is held to the CSRF token alone."""
    origin = request.headers.get("origin")
    if origin is not None and origin.lower() != _origin(request):
        return UiRefusal(
            403,
            RefusalCode.forbidden.value,
            "Refused: another site",
            "This form was sent from another site (its Origin is not this service's).",
        )
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.lower() != "same-origin":
        return UiRefusal(
            403,
            RefusalCode.forbidden.value,
            "Refused: another site",
            f"This form was sent from another site (Sec-Fetch-Site: {fetch_site[:40]}).",
        )
    return None


async def read_form(request: Request) -> Form:
    """The urlencoded form, bounded. Raises UiRefusal 415 for another content type and
    413 for a body over 64 KiB or 250 fields."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != FORM_CONTENT_TYPE:
        raise UiRefusal(
            415,
            "unsupported_media_type",
            "Not a form",
            f"The ops UI takes forms ({FORM_CONTENT_TYPE}) only.",
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise UiRefusal(413, "request_too_large", "Form too large", "The form is too large.")
    try:
        pairs = urllib.parse.parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            max_num_fields=MAX_FORM_FIELDS,
            strict_parsing=False,
        )
    except (UnicodeDecodeError, ValueError):
        raise UiRefusal(
            413, "request_too_large", "Form too large", "The form has too many fields."
        ) from None
    fields: dict[str, list[str]] = {}
    for key, value in pairs:
        fields.setdefault(key, []).append(value)
    return Form(fields)


def session_role(auth: Authenticator, session: UiSession) -> OperatorRole | None:
    """The role a session's operator has now; None when the session no longer stands:
    its operator is gone, or has another token than the one it signed in with."""
    if session.operator == ANONYMOUS_OPERATOR_NAME:
        if auth.operator_plane_open and session.credential_binding == OPEN_BINDING:
            return OperatorRole.operator
        return None
    digest = auth.credential_digest(session.operator)
    if digest is None:
        return None
    if not hmac.compare_digest(credential_binding(digest), session.credential_binding):
        return None
    return auth.role_of(session.operator)


def sign_in_location(request: Request) -> str:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.method != "GET":
        here = "/ops/ui/"
    return "/ops/ui/login?" + urllib.parse.urlencode({"next": here})


async def ui_caller(request: Request) -> UiCaller:
    """The caller of a UI page. Raises UiRefusal: to the sign-in form (303), 403 for a
    worker's credential or a UI that no credential opens, 503 without the database."""
    auth: Authenticator = request.app.state.auth
    sessions: UiSessions = request.app.state.ui_sessions
    token = operator_token_of(request)
    if token:
        try:
            principal = auth.require_viewer(token)
        except QueueRefusal as refusal:
            if refusal.code is RefusalCode.forbidden:
                raise UiRefusal(
                    403, "forbidden", "Not an operator", "Sign in as an operator or a viewer."
                ) from None
            if not auth.operator_auth_configured:
                raise _disabled() from None
            raise UiRefusal(
                303, "unauthenticated", "Sign in", "", location=sign_in_location(request)
            ) from None
        assert principal.name is not None and principal.role is not None
        return UiCaller(principal.name, principal.role)
    if not auth.operator_auth_configured and not auth.operator_plane_open:
        raise _disabled()
    presented = request.cookies.get(COOKIE_NAME)
    try:
        session = await sessions.find(presented) if presented else None
        if session is not None:
            role = session_role(auth, session)
            if role is not None:
                return UiCaller(session.operator, role, session)
        if auth.operator_plane_open:
            session_id, session = await sessions.open(
                ANONYMOUS_OPERATOR_NAME, OPEN_BINDING, client_of(request)
            )
            return UiCaller(ANONYMOUS_OPERATOR_NAME, OperatorRole.operator, session, session_id)
    except DatabaseUnavailable:
        raise unavailable() from None
    raise UiRefusal(
        303,
        "unauthenticated",
        "Sign in",
        "",
        location=sign_in_location(request),
        clear_cookie=presented is not None,
    )


async def acting_caller(request: Request, *, action: str, target: str) -> tuple[UiCaller, Form]:
    """The operator a form acts for, and the form: every check of the module docstring,
    in its order. Raises UiRefusal; a viewer's refusal is recorded in the audit trail."""
    form = await read_form(request)
    refusal = same_origin_refusal(request)
    if refusal is not None:
        raise refusal
    caller = await ui_caller(request)
    if caller.session is None:
        raise UiRefusal(
            403,
            RefusalCode.forbidden.value,
            "Sign in to act",
            "Forms act only within a signed-in session; scripts use the JSON API.",
        )
    presented = form.one("csrf_token") or ""
    if not hmac.compare_digest(presented.encode(), caller.session.csrf_token.encode()):
        raise UiRefusal(
            403,
            RefusalCode.forbidden.value,
            "Refused: the form is not this session's",
            "The form's CSRF token is missing or does not belong to this session; "
            "nothing was changed. Reload the page and try again.",
        )
    if caller.role is not OperatorRole.operator:
        refused = QueueRefusal(
            RefusalCode.forbidden, f"{caller.name} is a viewer: viewers read, only operators act"
        )
        audit: AuditLog = request.app.state.audit
        await audit.refused(caller.actor(request), action, target, refused)
        raise UiRefusal(403, refused.code.value, "Viewers cannot act", refused.detail)
    return caller, form


def _disabled() -> UiRefusal:
    return UiRefusal(
        403,
        "unauthenticated",
        "The ops UI is disabled",
        "No operator credential is configured (ACTIVITY_CORE_OPERATOR_TOKEN or "
        "ACTIVITY_CORE_OPERATORS_FILE), and open local access "
        "(ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS=1) is not enabled.",
    )


def unavailable() -> UiRefusal:
    return UiRefusal(
        503,
        "unavailable",
        "Database unavailable",
        "The database cannot be reached right now; this page will work again when it is.",
    )
