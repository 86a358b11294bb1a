"""A route's refusals, documented and answered: the {"code", "detail"} body each one has.

`error_docs` is what a router puts in its OpenAPI `responses` (the texts its own routes'
refusals mean, over the ones every JSON route shares); `refusal_outcome` is a refusal as
one item of a batch answer, with the status the single-item endpoint would have answered.
A refusal raised by a route is answered by error_handlers.py, with the same code and detail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from activity_core.queue.errors import QueueRefusal
from ops_contracts import REFUSAL_HTTP_STATUS, ErrorBody

__all__ = ["ACTION_STATUSES", "SHARED_REFUSALS", "error_docs", "refusal_outcome"]

# What a body, its media type or a lost database are refused as, on any JSON route.
SHARED_REFUSALS: Mapping[int, str] = {
    413: "request_too_large",
    415: "unsupported_media_type: a body whose media type names JSON"
    " but is not application/json (charset=utf-8 at most)",
    422: "invalid_request, with an errors list naming each bad field",
    503: "unavailable: the database cannot be reached; schema_not_current: it is not "
    "migrated for this build",
}

# What an action with a body on one target can be refused as: the credential, a target that
# is missing or in the wrong state, then the body and the database.
ACTION_STATUSES = (401, 403, 404, 409, 413, 415, 422, 503)


def error_docs(*statuses: int, described: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of these statuses: each the error body, with the router's
    own text (`described`) where it has one, else the shared one."""
    texts = {**SHARED_REFUSALS, **described}
    return {s: {"model": ErrorBody, "description": texts[s]} for s in statuses}


def refusal_outcome(refusal: QueueRefusal) -> dict[str, Any]:
    """A refused item of a batch: its status, code and detail, as its own request's."""
    return {
        "status": REFUSAL_HTTP_STATUS[refusal.code],
        "code": refusal.code.value,
        "detail": refusal.detail,
    }
