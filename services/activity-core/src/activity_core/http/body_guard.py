"""Strict JSON bodies before any router sees them.

Python's json module accepts NaN and Infinity and raises RecursionError on very deep
nesting; neither may reach a handler (a non-finite number is not JSON, and a deep body must
be a 422, not a 500). This ASGI middleware reads the body once, bounded by size, checks it,
and replays the same bytes to the app.

Credentials come before the body: a body it refuses (413, 422) is answered so only to a
caller that holds the credential its endpoint takes; anyone else gets that endpoint's
401/403 (credentials.py). A body it accepts goes on, and the route checks the credential
before anything else.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .credentials import credential_refusal
from .error_handlers import count_refusal, refusal_response
from .responses import error_response

MAX_JSON_DEPTH = 64


class BodyRejected(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        self.status, self.code, self.detail = status, code, detail


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _too_deep(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


def parse_strict_json(body: bytes) -> Any:
    """The body's JSON value; BodyRejected (422) for anything that is not finite JSON
    nested at most MAX_JSON_DEPTH deep."""
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise BodyRejected(422, "invalid_request", "the JSON body is nested too deeply") from None
    except ValueError as exc:
        raise BodyRejected(422, "invalid_request", f"the body is not valid JSON: {exc}") from None
    if _too_deep(value, MAX_JSON_DEPTH):
        raise BodyRejected(
            422, "invalid_request", f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels"
        )
    return value


def replaying(body: bytes, receive: Receive, *, more_body: bool) -> Receive:
    """A receive channel that yields the already-read body once, then the original's
    messages (the rest of an unfinished body, a disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": more_body}
        return await receive()

    return replay


class StrictJsonBody:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in {"POST", "PUT", "PATCH"}:
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        content_type = headers.get(b"content-type", b"").decode("latin-1").lower()
        try:
            body = await self._read(receive)
            if body.strip() and "application/x-www-form-urlencoded" not in content_type:
                parse_strict_json(body)
        except BodyRejected as rejected:
            refusal = credential_refusal(scope) if "app" in scope else None
            if refusal is not None:
                await refusal_response(scope["app"], refusal)(scope, receive, send)
                return
            if "app" in scope:
                count_refusal(scope["app"], rejected.code)
            # A 422 names what was bad, as every invalid_request does: here the body as a
            # whole (an empty loc), since it is not JSON a field could be found in.
            errors = None
            if rejected.code == "invalid_request":
                errors = [{"loc": [], "msg": rejected.detail, "type": "json_invalid"}]
            response = error_response(rejected.status, rejected.code, rejected.detail, errors)
            await response(scope, receive, send)
            return

        await self.app(scope, replaying(body, receive, more_body=False), send)

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise BodyRejected(
                    413, "request_too_large", f"the body exceeds {self.max_bytes} bytes"
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)
