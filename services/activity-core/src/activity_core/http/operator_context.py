"""Who acts on the operator plane, under which request id, and the audit of a role refusal.

The credential dependency (credentials.py) keeps the principal it authenticated on the
request; an action's route reads it back as an `Actor` (its name, role and the request's
id) and hands it to the operator services, which record what it did (operator/audit.py).

The request id is the caller's `X-Request-Id` when it is a plain token (1-128 of
letters, digits and . _ : -), else one made here; every answer of an operator-plane
action carries it back in `X-Request-Id`, refusals included.

A viewer that asks for an action is refused 403 forbidden by the credential dependency;
that refusal is recorded too, as the action the route stands for (ACTION_NAMES, default:
the route's name with `-` for `_`) on the target its path names. (A viewer's request whose
body is not JSON at all is refused 403 by the body guard before any route is matched, and
is only counted, in ops_run_refusals_total.)
"""

from __future__ import annotations

import logging
import re
import uuid

from fastapi import Request

from activity_core.http.auth import Authenticator, Principal
from activity_core.operator.audit import Actor, AuditLog, audit_target
from activity_core.queue.errors import QueueRefusal
from ops_contracts import OperatorRole, RefusalCode

__all__ = [
    "ACTION_NAMES",
    "REQUEST_ID_HEADER",
    "action_of",
    "actor_of",
    "audit_role_refusal",
    "request_id_of",
]

log = logging.getLogger("activity_core.http")

REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

# The audit name of each action route (by the route's name, its function's name): the
# action its own audit entries use, so a viewer's refused attempt reads the same.
ACTION_NAMES: dict[str, str] = {
    "requeue_run": "requeue",
    "requeue_runs": "requeue",
    "cancel_run": "cancel",
    "expire_leases": "expire-leases",
    "fire": "fire",
    "publish_run": "publish",
    "pause_automation": "automation.pause",
    "resume_automation": "automation.resume",
}

# The audit target a path parameter names.
_TARGET_KINDS = {"run_id": "ops_run", "automation_id": "automation"}


def request_id_of(request: Request) -> str:
    """The request's id: the caller's X-Request-Id when it is a plain token, else a new
    one; the same for the whole request."""
    known: str | None = getattr(request.state, "request_id", None)
    if known is not None:
        return known
    presented = request.headers.get(REQUEST_ID_HEADER)
    request_id = (
        presented if presented is not None and _REQUEST_ID.match(presented) else uuid.uuid4().hex
    )
    request.state.request_id = request_id
    return request_id


def actor_of(request: Request) -> Actor:
    """The operator-plane principal the credential dependency authenticated, as an Actor."""
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None or principal.name is None or principal.role is None:
        # a route that acts must declare OPERATOR_CREDENTIAL (credentials.py)
        raise RuntimeError("no operator principal: the route declares no operator credential")
    return Actor(principal.name, principal.role, request_id_of(request))


def action_of(request: Request) -> tuple[str, str]:
    """(action, target) of the route a request reached, for the audit trail."""
    route = request.scope.get("route")
    name = getattr(route, "name", None) or "unknown"
    action = ACTION_NAMES.get(name, name.replace("_", "-"))
    for param, kind in _TARGET_KINDS.items():
        if param in request.path_params:
            return action, audit_target(kind, request.path_params[param])
    return action, "queue"


async def audit_role_refusal(request: Request, token: str | None, refusal: QueueRefusal) -> None:
    """Record a viewer's attempt at an action (403 forbidden); anyone else's refusal at the
    door (no or another kind of credential) is counted, not attributed."""
    if refusal.code is not RefusalCode.forbidden:
        return
    auth: Authenticator = request.app.state.auth
    try:
        principal = auth.identify(token)
    except QueueRefusal:
        return
    if principal.kind != "operator" or principal.role is not OperatorRole.viewer:
        return
    assert principal.name is not None
    audit: AuditLog | None = getattr(request.app.state, "audit", None)
    if audit is None:
        return
    action, target = action_of(request)
    actor = Actor(principal.name, principal.role, request_id_of(request))
    await audit.refused(actor, action, target, refusal)
