"""`ops_http_requests_total{method, route, status}`: every answer of the API, counted, and
`ops_http_request_duration_seconds{method, route}`: how long each took.

The outermost middleware, so it counts every answer: the worker fast path's, the body
guard's refusals, the routes'. `route` is the route's template
(`/ops-runs/{run_id}/complete`), never the path, so the series stay few: the route the
router matched, or, for an answer given before routing (fast path, body guard), the route
the request would have reached; `unmatched` when none would. Methods outside the usual
ones are counted as `other`.

An exception that no handler answers propagates through here to Starlette's server-error
middleware, which answers 500: it is counted as 500 (or as the status already sent, if the
answer had begun). A request whose task is cancelled (the client went away) has no answer
and is not counted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from activity_core.queue.metrics import QueueMetrics

__all__ = ["ROUTE_TEMPLATE_KEY", "UNMATCHED", "RequestMetrics", "route_template"]

UNMATCHED = "unmatched"
# A middleware inside this one that answers for a route itself (the worker fast path)
# names the route's template under this scope key.
ROUTE_TEMPLATE_KEY = "activity_core.route_template"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_template(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that answered the request (the router put it in the
    scope), or else of the first of `routes` that would have answered it."""
    named = scope.get(ROUTE_TEMPLATE_KEY)
    if isinstance(named, str):
        return named
    route = scope.get("route")
    if route is None:
        partial = None
        for candidate in routes:
            match, _ = candidate.matches(scope)
            if match is Match.FULL:
                route = candidate
                break
            if match is Match.PARTIAL and partial is None:
                partial = candidate  # the path matches, the method does not (405)
        route = route or partial
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


class RequestMetrics:
    def __init__(
        self, app: ASGIApp, *, metrics: QueueMetrics, routers: Sequence[APIRouter]
    ) -> None:
        self.app = app
        self.counter = metrics.http_requests
        self.seconds = metrics.http_request_seconds
        # The routes in the order the app matches them (it includes the routers in this
        # order, without prefixes of its own).
        self.routes: tuple[BaseRoute, ...] = tuple(r for router in routers for r in router.routes)
        # The labelled children, looked up once per label set: `labels()` costs more than
        # the increment. Finite: methods, route templates and statuses are few.
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._timers: dict[tuple[str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: int | None = None
        started = time.perf_counter()

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except Exception:
            self._count(scope, status or 500, started)
            raise
        if status is not None:
            self._count(scope, status, started)

    def _count(self, scope: Scope, status: int, started: float) -> None:
        method = scope["method"] if scope["method"] in _METHODS else "other"
        route = route_template(scope, self.routes)
        counter = self._counters.get((method, route, status))
        if counter is None:
            counter = self.counter.labels(method=method, route=route, status=str(status))
            self._counters[(method, route, status)] = counter
        timer = self._timers.get((method, route))
        if timer is None:
            timer = self.seconds.labels(method=method, route=route)
            self._timers[(method, route)] = timer
        counter.inc()
        timer.observe(time.perf_counter() - started)
