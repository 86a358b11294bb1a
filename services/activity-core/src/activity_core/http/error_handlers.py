"""Map domain errors and framework errors to the documented error body.

A lost database is 503 `unavailable` with Retry-After, whichever way it arrives: as
DatabaseUnavailable from a unit of work (db/unavailable.py decides what counts and when a
unit runs again), or, should a driver failure reach the edge untranslated, as the driver's
own exception, classified by the same rule. Never a 500: the request may well succeed a
second later, and the caller should retry it, not report a bug.

A request for a page of the ops UI (/ops/ui) that the framework refuses (its path or
query not valid, no such page or method) is answered as a page with the same status and
code (ui_pages.py), never with the JSON API's body.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from activity_core.db.errors import SCHEMA_NOT_CURRENT_FAILURES, UNTRANSLATED_LOSS_FAILURES
from activity_core.db.unavailable import is_unavailable
from activity_core.http.responses import error_response
from activity_core.http.ui_guard import UiRefusal
from activity_core.http.ui_pages import is_ui_request, refusal_page
from activity_core.queue.errors import DatabaseUnavailable, QueueRefusal
from activity_core.temporal.errors import AutomationNotFound, AutomationPaused, TemporalUnavailable
from ops_contracts import REFUSAL_HTTP_STATUS, RefusalCode

__all__ = ["count_refusal", "install_error_handlers", "refusal_response"]

log = logging.getLogger("activity_core.http")

# The heading of the ops UI's page for a framework refusal (no route, no such method).
_UI_HEADINGS = {
    RefusalCode.not_found: "Not found",
    RefusalCode.method_not_allowed: "Not possible here",
}

_HTTP_CODES = {
    404: RefusalCode.not_found,
    405: RefusalCode.method_not_allowed,
    401: RefusalCode.unauthenticated,
    403: RefusalCode.forbidden,
}


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors():
        loc = [part for part in err.get("loc", ()) if part != "body"]
        out.append(
            {
                "loc": loc,
                "msg": str(err.get("msg", "invalid")),
                "type": str(err.get("type", "value_error")),
            }
        )
    return out


def count_refusal(app: Any, code: str) -> None:
    """Every refusal, at the edge or in the queue, is counted here by its machine code."""
    metrics = getattr(app.state, "metrics", None)
    if metrics is not None:
        metrics.refusals.labels(code=code).inc()


def refusal_response(app: Any, exc: QueueRefusal) -> Response:
    """A refusal's documented answer, counted: from a route, or from a middleware that
    answers before the routes (the body guard)."""
    count_refusal(app, exc.code.value)
    errors = None
    if exc.code is RefusalCode.invalid_request:
        errors = [{"loc": list(exc.loc), "msg": exc.detail, "type": "value_error"}]
    response = error_response(REFUSAL_HTTP_STATUS[exc.code], exc.code.value, exc.detail, errors)
    if exc.code is RefusalCode.unavailable:
        # our own resources (a changes check or view out of time): retry, as for the database
        response.headers["Retry-After"] = "5"
    return response


def _with_request_id(request: Request, response: Response) -> Response:
    """An operator action's refusal carries its request id back, as its answer would
    (http/operator_context.py); other requests have none."""
    request_id = request.scope.get("state", {}).get("request_id")
    if request_id is not None:
        response.headers["X-Request-Id"] = request_id
    return response


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(QueueRefusal)
    async def _refusal(request: Request, exc: QueueRefusal) -> Response:
        return _with_request_id(request, refusal_response(request.app, exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        count_refusal(request.app, "invalid_request")
        errors = _field_errors(exc)
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "body" for e in errors[:5])
        if is_ui_request(request.scope):
            refusal = UiRefusal(
                422, RefusalCode.invalid_request.value, "Invalid request", f"Not valid: {fields}."
            )
            return refusal_page(request, refusal)
        response = error_response(422, "invalid_request", f"invalid request: {fields}", errors)
        return _with_request_id(request, response)

    @app.exception_handler(DatabaseUnavailable)
    async def _unavailable(_: Request, exc: DatabaseUnavailable) -> Response:
        log.warning("database unavailable: %s", exc)
        return _database_unavailable()

    async def _driver_failure(_: Request, exc: Exception) -> Response:
        if not is_unavailable(exc):
            return _internal_error(exc)
        log.warning("database unavailable: %s (untranslated)", type(exc).__name__)
        return _database_unavailable()

    # db/errors.py: what a lost database raises outside a unit of work
    for failure in UNTRANSLATED_LOSS_FAILURES:
        app.add_exception_handler(failure, _driver_failure)

    async def _schema_missing(_: Request, exc: Exception) -> Response:
        # `serve` without --migrate on a database this build has not migrated: an operator
        # error with a known fix, not an internal one (/readyz says the same).
        log.warning("database schema is not current: %s", type(exc).__name__)
        response = error_response(
            503,
            RefusalCode.schema_not_current,
            "the database schema is not migrated for this build; run `activity-core migrate`",
        )
        response.headers["Retry-After"] = "5"
        return response

    for failure in SCHEMA_NOT_CURRENT_FAILURES:
        app.add_exception_handler(failure, _schema_missing)

    @app.exception_handler(AutomationNotFound)
    async def _no_automation(_: Request, exc: AutomationNotFound) -> Response:
        return error_response(404, RefusalCode.not_found, str(exc))

    @app.exception_handler(AutomationPaused)
    async def _paused(_: Request, exc: AutomationPaused) -> Response:
        return error_response(409, RefusalCode.state_conflict, str(exc))

    @app.exception_handler(TemporalUnavailable)
    async def _temporal_unavailable(_: Request, exc: TemporalUnavailable) -> Response:
        log.warning("temporal unavailable: %s", exc)
        response = error_response(503, RefusalCode.unavailable, "Temporal is not reachable; retry")
        response.headers["Retry-After"] = "5"
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code = _HTTP_CODES.get(exc.status_code, RefusalCode.http_error)
        if is_ui_request(request.scope):
            heading = _UI_HEADINGS.get(code, "Refused")
            refusal = UiRefusal(exc.status_code, code.value, heading, str(exc.detail))
            return refusal_page(request, refusal)
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        return _internal_error(exc)


def _database_unavailable() -> Response:
    response = error_response(503, RefusalCode.unavailable, "the database is not reachable; retry")
    response.headers["Retry-After"] = "1"
    return response


def _internal_error(exc: Exception) -> Response:
    log.error("unhandled error: %s", type(exc).__name__, exc_info=exc)
    return error_response(500, RefusalCode.internal_error, "an internal error occurred")
