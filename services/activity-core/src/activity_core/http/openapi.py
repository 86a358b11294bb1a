"""The OpenAPI document: FastAPI's, plus the credentials the routes declare.

FastAPI cannot see a credential a route checks in a dependency of its own
(credentials.py), so its document would say every operation is open. Here each
operation's security requirement is made from its route's declaration, the one the
routes themselves enforce: a worker credential (`WORKER_CREDENTIAL`), an operator-plane
credential of any role (`VIEWER_CREDENTIAL`) or of role `operator`
(`OPERATOR_CREDENTIAL`). A token is accepted as a bearer token or in its own header, so
each kind has two schemes, and a requirement lists them as alternatives. Statuses and
operation ids are declared on the routes; tests/integration/test_ac_openapi_truth.py
holds the document to what the app answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from activity_core.http.credentials import Credential, credential_of

__all__ = ["SECURITY_SCHEMES", "install_openapi", "security_requirement"]

_WORKER = (
    "A worker token (ACTIVITY_CORE_WORKER_TOKEN, or one listed in "
    "ACTIVITY_CORE_WORKER_CREDENTIALS_FILE). It is bound to one worker id: a body's "
    "`worker_id` must be that id (else 403 worker_identity_mismatch)."
)
_OPERATOR = (
    "An operator-plane token: ACTIVITY_CORE_OPERATOR_TOKEN (the operator named `operator`) "
    "or a named operator's token (ACTIVITY_CORE_OPERATORS_FILE). Role `operator` reads and "
    "acts; role `viewer` reads only (an action answers it 403 forbidden, audited). A "
    "requirement that lists the role `operator` is an action."
)

SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "workerBearer": {"type": "http", "scheme": "bearer", "description": _WORKER},
    "workerToken": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Worker-Token",
        "description": _WORKER,
    },
    "operatorBearer": {"type": "http", "scheme": "bearer", "description": _OPERATOR},
    "operatorToken": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Operator-Token",
        "description": _OPERATOR,
    },
}


def security_requirement(kind: Credential) -> list[dict[str, list[str]]]:
    """The alternatives that satisfy a route declaring this credential (OpenAPI 3.1: the
    list of a non-OAuth scheme names the roles it requires)."""
    if kind is Credential.worker:
        return [{"workerBearer": []}, {"workerToken": []}]
    roles = ["operator"] if kind is Credential.operator else []
    return [{"operatorBearer": roles}, {"operatorToken": list(roles)}]


def _declared(routers: Iterable[APIRouter]) -> dict[tuple[str, str], Credential | None]:
    return {
        (method.lower(), route.path_format): credential_of(route)
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and route.include_in_schema
        for method in route.methods or ()
    }


def install_openapi(app: FastAPI, routers: Iterable[APIRouter]) -> None:
    """Serve the document with each operation's security requirement (built once, on the
    first request for it, as FastAPI builds its own)."""
    declared = _declared(routers)
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = build()
        for path, item in document["paths"].items():
            for method, operation in item.items():
                kind = declared.get((method, path))
                if kind is not None:
                    operation["security"] = security_requirement(kind)
        document.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
        return document

    app.openapi = openapi  # type: ignore[method-assign]
