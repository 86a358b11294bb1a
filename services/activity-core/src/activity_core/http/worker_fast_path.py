"""Valid worker requests answered without the framework; everything else handed on.

Claim and close are the queue's hot path, and through FastAPI they cost more CPU than the
queue's own code: an included router is matched twice per request, dependencies are
solved, the body is parsed twice and the request crosses eight ASGI layers (profile of
`bench/claim_throughput.py`; the figures are in docs/activity-core-design.md). This
middleware answers `POST /ops-runs/claim` and `POST /ops-runs/{run_id}/heartbeat|complete|fail`
itself, but only when the request is plainly valid:

- a canonical lower-case UUID in the path, no root path;
- the media type the body guard takes (`accepts_json`: application/json, at most
  `charset=utf-8`) and a declared Content-Length within the body limit;
- strict JSON (the body guard's own parser: no duplicate keys, no NaN, no unpaired
  surrogate, no BOM, nothing after the value, bounded depth) that the endpoint's body
  model accepts.

Anything else is handed, with the same bytes, to the FastAPI app: its routes stay the
documented interface (OpenAPI) and the one place that words the 4xx of a malformed
request. A valid request runs the same operation as the route (worker_ops.py), its answer
is validated and serialized against the same response model, and an exception is answered
by the app's own exception handlers, looked up as Starlette's ExceptionMiddleware looks
them up (an exception none handles propagates to the server-error handler, as from a
route). tests/integration/test_ac_worker_fast_path.py checks that both doors answer
byte-identical responses and leave identical rows.

Credentials before the body holds on both doors: a valid body's operation authenticates
the caller before it acts on anything the body says, and a body handed on meets the body
guard and the route, which check the credential before they word any 4xx of the body.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from activity_core.http.body_guard import BodyRejected, accepts_json, parse_strict_json, replaying
from activity_core.http.deps import worker_call
from activity_core.http.request_metrics import ROUTE_TEMPLATE_KEY
from activity_core.http.worker_ops import CLAIM, RUN_ENDPOINTS, WorkerEndpoint
from ops_contracts import PARSED_STRICT_JSON

__all__ = ["WorkerFastPath", "match_worker_path"]

_PREFIX = "/ops-runs/"
_CLAIM_PATH = "/ops-runs/claim"
_UUID_LENGTH = 36

Handler = Callable[[Request, Exception], Awaitable[Response]]


def match_worker_path(path: str) -> tuple[WorkerEndpoint, uuid.UUID | None] | None:
    """The worker endpoint a path names, with its run id; None for any other path or for
    a run id that is not a canonical lower-case UUID (the route words that 422)."""
    if path == _CLAIM_PATH:
        return CLAIM, None
    if not path.startswith(_PREFIX):
        return None
    run_part, _, action = path[len(_PREFIX) :].partition("/")
    endpoint = RUN_ENDPOINTS.get(action)
    if endpoint is None or len(run_part) != _UUID_LENGTH:
        return None
    try:
        run_id = uuid.UUID(run_part)
    except ValueError:
        return None
    return (endpoint, run_id) if str(run_id) == run_part else None


def _declared_within(value: str | None, limit: int) -> bool:
    """A Content-Length is declared and within the limit (a chunked body has none). The
    length of the text is bounded first: int() refuses very long digit strings."""
    return value is not None and value.isdigit() and len(value) <= 12 and int(value) <= limit


def exception_handler(app: Any, exc: Exception) -> Handler | None:
    """The handler the app registered for this exception, as ExceptionMiddleware picks
    it; None when only the server-error handler (500 / Exception) would answer."""
    handlers: dict[Any, Handler] = app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        handler = handlers.get(cls)
        if handler is not None:
            return handler
    return None


class WorkerFastPath:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = None
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            matched = match_worker_path(scope["path"])
        if matched is None:
            await self.app(scope, receive, send)
            return
        endpoint, run_id = matched
        request = Request(scope, receive)
        headers = request.headers
        if not accepts_json(headers.get("content-type")) or not _declared_within(
            headers.get("content-length"), self.max_bytes
        ):
            await self.app(scope, receive, send)
            return
        body, complete = await self._read(receive)
        replay = replaying(body, receive, more_body=not complete)
        parsed = self._valid_body(endpoint, body) if complete else None
        if parsed is None:
            await self.app(scope, replay, send)
            return
        # The route this answer stands for, for the request metrics outside: they would
        # otherwise match the path against every route of the app to find it.
        scope[ROUTE_TEMPLATE_KEY] = endpoint.route
        response = await self._answer(request, endpoint, run_id, parsed)
        await response(scope, replay, send)

    @staticmethod
    def _valid_body(endpoint: WorkerEndpoint, body: bytes) -> Any:
        try:
            # The same steps as the body guard and then FastAPI: strict JSON, then the
            # model in Python mode on the parsed value, which the model is told came from
            # strict JSON (it need not encode a result to prove it finite JSON).
            return endpoint.body_model.model_validate(
                parse_strict_json(body), context=PARSED_STRICT_JSON
            )
        except (BodyRejected, ValidationError):
            return None

    @staticmethod
    async def _answer(
        request: Request, endpoint: WorkerEndpoint, run_id: uuid.UUID | None, body: Any
    ) -> Response:
        try:
            content = await endpoint.operate(worker_call(request), run_id, body)
            return Response(endpoint.response_json(content), media_type="application/json")
        except Exception as exc:
            handler = exception_handler(request.app, exc)
            if handler is None:
                raise
            return await handler(request, exc)

    async def _read(self, receive: Receive) -> tuple[bytes, bool]:
        """The body, and whether all of it arrived within the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), False
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_bytes:
                return b"".join(chunks), False
            if not message.get("more_body", False):
                return b"".join(chunks), True
