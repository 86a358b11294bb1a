"""Strict JSON bodies before any router sees them.

Every POST, PUT or PATCH with a body meets this ASGI middleware first. It reads the body
once, bounded by size, decides, and replays the same bytes to the app. The worker fast
path (worker_fast_path.py) takes only what passes here, by the same two functions
(`accepts_json`, `parse_strict_json`), so both doors answer alike.

**Media type.** The API takes one: `application/json`, with no parameter but an optional
`charset=utf-8` (any case, quoted or not). Any other media type that names JSON — a
structured syntax suffix (`application/merge-patch+json`, `application/vnd.foo+json`),
`text/json`, `application/x-json`, `application/json` with another charset or another
parameter — is 415 `unsupported_media_type`: a patch or vendor type promises semantics
these endpoints do not have, JSON text is UTF-8 (RFC 8259, section 8.1) and a charset
that says otherwise is not transcoded. A form (`application/x-www-form-urlencoded`,
`multipart/form-data`) is handed on unread: the ops UI takes forms and words its own
refusals. So is every body sent to the ops UI (/ops/ui), whatever its media type: its
pages take forms only and answer anything else with a page of their own (415), never
with this API's JSON body. Any other body (no Content-Type, `text/plain`, …) is parsed
as below, and the route then refuses what is not a JSON object of its model (422).

**Strict JSON.** What Python's json module would accept but JSON or this API does not is
422 `invalid_request` here, never a 500 and never a silent guess:

- not UTF-8, or UTF-8 after a byte order mark (UTF-16 and UTF-32 are not sniffed);
- a key twice in one object, at any depth (parsers disagree on which one wins: a body
  must mean one thing to every reader, a proxy's and ours);
- NaN, Infinity, -Infinity, or a number too large for a float (1e400);
- a string, or a key, holding an unpaired surrogate escape (`"\\ud800"`): it names no
  character, cannot be stored in PostgreSQL text and cannot be encoded back as UTF-8;
- anything after the value but whitespace;
- nesting deeper than MAX_JSON_DEPTH (64) levels (far deeper, Python's parser raises
  RecursionError, which is the same 422).

The 422 names the body as a whole (`errors: [{"loc": [], "type": "json_invalid", ...}]`),
since there is no field to point at in a body that is not JSON.

**Changes bundles.** `PUT /ops-runs/{run_id}/changes` takes a git bundle, not JSON, and
up to ACTIVITY_CORE_CHANGES_MAX_BYTES rather than ACTIVITY_CORE_MAX_BODY_BYTES: its body
is handed on unread (`is_changes_upload`), and its route reads it within its own bound
and refuses any other media type (routes_changes_upload.py).

Credentials come before the body: a body refused here (413, 415, 422) is answered so only
to a caller that holds the credential its endpoint takes; anyone else gets that endpoint's
401/403 (credentials.py). A body it accepts goes on, and the route checks the credential
before anything else.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from activity_core.http.credentials import credential_refusal
from activity_core.http.error_handlers import count_refusal, refusal_response
from activity_core.http.responses import error_response
from activity_core.http.ui_pages import is_ui_request
from ops_contracts import REFUSAL_HTTP_STATUS, RefusalCode

__all__ = [
    "MAX_JSON_DEPTH",
    "BodyRejected",
    "StrictJsonBody",
    "accepts_json",
    "check_tree",
    "is_changes_upload",
    "media_essence",
    "names_json",
    "parse_strict_json",
    "replaying",
]

MAX_JSON_DEPTH = 64
_FORMS = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})
_SURROGATE = re.compile("[\ud800-\udfff]")
# A surrogate can only come from an escape (a UTF-8 body cannot encode one): a body
# without an escape that could name one holds none. Over-matches an escaped backslash
# followed by "ud8…", which only costs the walk.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
# a key quoted in a refusal's detail is cut to this many characters
_KEY_SHOWN = 64


class BodyRejected(Exception):
    def __init__(self, code: RefusalCode, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail

    @property
    def status(self) -> int:
        return REFUSAL_HTTP_STATUS[self.code]


def _media_type(content_type: str) -> tuple[str, list[tuple[str, str]]]:
    """The essence (`type/subtype`, lower case) and the parameters (name lower case, value
    unquoted) of a Content-Type."""
    essence, *parameters = content_type.split(";")
    parsed = []
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        parsed.append((name.strip().lower(), value.strip().strip('"')))
    return essence.strip().lower(), parsed


def media_essence(content_type: str | None) -> str:
    """A Content-Type's `type/subtype`, lower case ("" when there is none)."""
    return "" if content_type is None else _media_type(content_type)[0]


def accepts_json(content_type: str | None) -> bool:
    """The one media type the API takes: application/json, optionally charset=utf-8."""
    if content_type is None:
        return False
    essence, parameters = _media_type(content_type)
    return essence == "application/json" and all(
        name == "charset" and value.lower() == "utf-8" for name, value in parameters
    )


def names_json(content_type: str | None) -> bool:
    """A media type that says its body is JSON (of some flavour): the API takes only the
    one `accepts_json` names and refuses the rest with 415."""
    return content_type is not None and "json" in _media_type(content_type)[0]


# /ops-runs/<one segment>/changes, below the app's root path
_CHANGES_UPLOAD = re.compile(r"^/ops-runs/[^/]+/changes$")


def is_changes_upload(scope: Scope) -> bool:
    """The request is an upload of a run's changes bundle (its route reads its body)."""
    if scope.get("method") != "PUT":
        return False
    path: str = scope.get("path", "")
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path + "/"):
        path = path[len(root_path) :]
    return _CHANGES_UPLOAD.match(path) is not None


def _is_form(content_type: str | None) -> bool:
    return content_type is not None and _media_type(content_type)[0] in _FORMS


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"{literal[:_KEY_SHOWN]} is out of range for a number")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                shown = json.dumps(key[:_KEY_SHOWN])
                raise BodyRejected(
                    RefusalCode.invalid_request,
                    f"the body is not valid JSON: the key {shown} appears twice in one object",
                )
            seen.add(key)
    return obj


def _unpaired_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def check_tree(value: Any) -> None:
    """Depth, and no string or key with an unpaired surrogate; without recursion, each
    container once (the strings are checked where they sit)."""
    if isinstance(value, str) and _unpaired_surrogate(value):
        raise _surrogate_refusal()
    if not isinstance(value, dict | list):
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise BodyRejected(
                RefusalCode.invalid_request,
                f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels",
            )
        if isinstance(node, dict):
            if any(_unpaired_surrogate(key) for key in node):
                raise _surrogate_refusal()
            children = node.values()
        else:
            children = node
        for child in children:
            if isinstance(child, str):
                if _unpaired_surrogate(child):
                    raise _surrogate_refusal()
            elif isinstance(child, dict | list):
                stack.append((child, depth + 1))


def _surrogate_refusal() -> BodyRejected:
    return BodyRejected(
        RefusalCode.invalid_request,
        "the body is not valid JSON: a string holds an unpaired surrogate escape "
        "(\\ud800-\\udfff), which names no character",
    )


def parse_strict_json(body: bytes) -> Any:
    """The body's JSON value; BodyRejected (422 invalid_request) for anything that is not
    strict JSON (the module docstring lists what that excludes)."""
    if body.startswith(codecs.BOM_UTF8):
        raise BodyRejected(
            RefusalCode.invalid_request,
            "the body starts with a byte order mark: JSON text is UTF-8 without one",
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyRejected(
            RefusalCode.invalid_request,
            f"the body is not UTF-8: {exc.reason} at byte {exc.start}",
        ) from None
    try:
        value = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise BodyRejected(
            RefusalCode.invalid_request, "the JSON body is nested too deeply"
        ) from None
    except ValueError as exc:
        raise BodyRejected(
            RefusalCode.invalid_request, f"the body is not valid JSON: {exc}"
        ) from None
    # The walk looks for what the bytes can already rule out: no surrogate escape, and
    # fewer brackets than the depth bound (each level opens one). Most bodies skip it.
    if (
        _SURROGATE_ESCAPE.search(body) is not None
        or body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH
    ):
        check_tree(value)
    return value


def check_body(content_type: str | None, body: bytes) -> None:
    """Raises BodyRejected (415, 422) for a body the API does not take; a form, or no body
    at all, passes unread."""
    if not body.strip() or _is_form(content_type):
        return
    if names_json(content_type) and not accepts_json(content_type):
        raise BodyRejected(
            RefusalCode.unsupported_media_type,
            "the body must be application/json (UTF-8; no parameter but charset=utf-8), "
            f"not {(content_type or '')[:100]}",
        )
    parse_strict_json(body)


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
        if (
            scope["type"] != "http"
            or scope["method"] not in {"POST", "PUT", "PATCH"}
            or is_ui_request(scope)
            or is_changes_upload(scope)
        ):
            await self.app(scope, receive, send)
            return
        content_type = None
        for name, value in scope.get("headers", []):
            if name.lower() == b"content-type":
                content_type = value.decode("latin-1")
                break
        try:
            body = await self._read(receive)
            check_body(content_type, body)
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
            if rejected.code is RefusalCode.invalid_request:
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
                    RefusalCode.request_too_large, f"the body exceeds {self.max_bytes} bytes"
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)
