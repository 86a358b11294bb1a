"""Credentials before the request: a caller without a valid credential for an endpoint is
401/403 whatever its path, query or body says ("Credentials are checked before the body").

Each protected route declares the kind of credential it takes as its first dependency,
`dependencies=[WORKER_CREDENTIAL]`, `[VIEWER_CREDENTIAL]` (operator-plane reads: a named
operator or viewer) or `[OPERATOR_CREDENTIAL]` (operator actions: role `operator`; a
viewer is refused 403 forbidden, and that refusal is audited). FastAPI solves a route's
own dependencies before it validates path, query and body, and an exception a dependency
raises ends the request at once; so within FastAPI the credential is checked first. Two
things answer a request before FastAPI does, and both defer to the same declaration:

- the body guard (body_guard.py) words a body that is not JSON, or too large, only to a
  caller its endpoint accepts (`credential_refusal`, which finds the route's declaration
  in the app's `CredentialTable`, built from the same routers); anyone else gets the
  401/403;
- the worker fast path (worker_fast_path.py) answers only valid bodies, and its operation
  authenticates the caller before anything the body says is acted on; everything else it
  hands to the body guard and the routes.

`GET /metrics` declares `[METRICS_CREDENTIAL]`: Prometheus's scrape token
(ACTIVITY_CORE_METRICS_TOKEN, `Authenticator.require_metrics`), when one is configured. It
is not one of the API's `Credential` kinds: it names no caller, opens no other route, and
its route is not in the OpenAPI document; and it is no body's concern (a GET).

The worker check here is the credential alone (`Authenticator.authenticate_worker`): that
the body's `worker_id` is the authenticated identity (`worker_identity_mismatch`) needs a
valid body, so the operation checks it after the body was validated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.params import Depends as DependsParam
from fastapi.routing import APIRoute
from starlette.types import Scope

from activity_core.http.auth import Authenticator, Principal, bearer_token
from activity_core.http.deps import operator_token_of, worker_token_of
from activity_core.http.operator_context import audit_role_refusal
from activity_core.queue.errors import QueueRefusal

__all__ = [
    "METRICS_CREDENTIAL",
    "OPERATOR_CREDENTIAL",
    "VIEWER_CREDENTIAL",
    "WORKER_CREDENTIAL",
    "Credential",
    "CredentialTable",
    "credential_of",
    "credential_refusal",
]


class Credential(StrEnum):
    worker = "worker"
    # an operator action: a named operator of role `operator`
    operator = "operator"
    # an operator-plane read: a named operator of either role (`operator` or `viewer`)
    viewer = "viewer"


def check_credential(request: Request, kind: Credential) -> Principal | None:
    """Raises QueueRefusal (401/403) unless the request carries a credential of this kind
    (or that kind of endpoint is open for local development); the operator-plane
    principal it authenticated (None for a worker)."""
    auth: Authenticator = request.app.state.auth
    if kind is Credential.worker:
        auth.authenticate_worker(worker_token_of(request))
        return None
    if kind is Credential.viewer:
        return auth.require_viewer(operator_token_of(request))
    return auth.require_operator(operator_token_of(request))


async def _worker_credential(request: Request) -> None:
    check_credential(request, Credential.worker)


async def _viewer_credential(request: Request) -> None:
    request.state.principal = check_credential(request, Credential.viewer)


async def _operator_credential(request: Request) -> None:
    try:
        request.state.principal = check_credential(request, Credential.operator)
    except QueueRefusal as refusal:
        await audit_role_refusal(request, operator_token_of(request), refusal)
        raise


async def _metrics_credential(request: Request) -> None:
    # a bearer token only: that is what Prometheus sends (its scrape `authorization`)
    auth: Authenticator = request.app.state.auth
    auth.require_metrics(bearer_token(request.headers.get("authorization")))


WORKER_CREDENTIAL = Depends(_worker_credential)
VIEWER_CREDENTIAL = Depends(_viewer_credential)
OPERATOR_CREDENTIAL = Depends(_operator_credential)
METRICS_CREDENTIAL = Depends(_metrics_credential)
_KIND_OF_DEPENDENCY = {
    _worker_credential: Credential.worker,
    _viewer_credential: Credential.viewer,
    _operator_credential: Credential.operator,
}


def credential_of(route: Any) -> Credential | None:
    """The credential a route declares (its WORKER_ / OPERATOR_CREDENTIAL dependency)."""
    for dependency in getattr(route, "dependencies", None) or ():
        if isinstance(dependency, DependsParam):
            kind = _KIND_OF_DEPENDENCY.get(dependency.dependency)  # type: ignore[arg-type]
            if kind is not None:
                return kind
    return None


@dataclass(frozen=True)
class CredentialTable:
    """Which credential the route a request reaches declares, for the middleware that
    answers before the router: every route of the app's routers in the order the router
    tries them, the first that matches method and path deciding (as Starlette's router
    picks a route; no match is the router's 404/405, and takes no credential)."""

    routes: tuple[tuple[re.Pattern[str], frozenset[str], Credential | None], ...]

    @classmethod
    def of(cls, routers: Iterable[APIRouter]) -> CredentialTable:
        return cls(
            tuple(
                (route.path_regex, frozenset(route.methods or ()), credential_of(route))
                for router in routers
                for route in router.routes
                if isinstance(route, APIRoute)
            )
        )

    def credential(self, method: str, path: str) -> Credential | None:
        for path_regex, methods, kind in self.routes:
            if method in methods and path_regex.match(path):
                return kind
        return None


def _route_path(scope: Scope) -> str:
    """The path the router matches: the request path below the app's root path."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path + "/"):
        return path[len(root_path) :]
    return path


def credential_refusal(scope: Scope) -> QueueRefusal | None:
    """The refusal a request's credential earns at the route it reaches, or None when that
    route takes no credential or the caller holds the one it takes."""
    table: CredentialTable | None = getattr(scope["app"].state, "credential_table", None)
    if table is None:
        return None
    kind = table.credential(scope["method"], _route_path(scope))
    if kind is None:
        return None
    try:
        check_credential(Request(scope), kind)
    except QueueRefusal as refusal:
        return refusal
    return None
