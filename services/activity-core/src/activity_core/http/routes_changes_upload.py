"""`PUT /ops-runs/{run_id}/changes`: a worker hands over its attempt's changes bundle.

Edge only: the worker credential (its first dependency, as every worker endpoint), the
worker identity bound to the token, the media type, the body read within
ACTIVITY_CORE_CHANGES_MAX_BYTES (the body guard hands this route's body on unread), the
digest header; then the queue's unit of work (queue/changes_upload.py) fences, verifies
and stores. docs/changes.md is the contract.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from activity_core.http.body_guard import media_essence
from activity_core.http.credentials import WORKER_CREDENTIAL
from activity_core.http.deps import Settings, Worker
from activity_core.queue.errors import QueueRefusal
from ops_contracts import (
    CHANGES_DIGEST_HEADER,
    CHANGES_DIGEST_PATTERN,
    CHANGES_MEDIA_TYPE,
    ChangesStored,
    ErrorBody,
    RefusalCode,
    WorkerId,
)

__all__ = ["router"]

router = APIRouter(prefix="/ops-runs", tags=["ops-runs"])

_DIGEST = re.compile(CHANGES_DIGEST_PATTERN)

_ERRORS: dict[int, str] = {
    401: "unauthenticated: no or an invalid credential",
    403: "forbidden (not a worker credential) or worker_identity_mismatch (`worker_id` is "
    "not the identity bound to the token)",
    404: "not_found: no ops run with this id",
    409: "wrong_owner, expired_lease (the lease ended, or `attempt` is not the run's current "
    "attempt), state_conflict (the run is open), terminal_conflict (the run is terminal "
    "and this is not its last owner repeating the stored upload), changes_conflict "
    "(another digest is already stored for this attempt)",
    413: "changes_too_large: the bundle exceeds ACTIVITY_CORE_CHANGES_MAX_BYTES",
    415: f"unsupported_media_type: the body must be {CHANGES_MEDIA_TYPE}",
    422: "changes_invalid, with the reason: X-Changes-Digest missing or not the body's "
    "digest, not a bundle of the contract's shape, another attempt's ref, a merge, more "
    "or fewer commits than the grant's commit_count, a path outside the grant, history "
    "that does not descend from the baseline, or a run queued without a repository "
    "grant; invalid_request for a bad `worker_id` or `attempt`",
    503: "unavailable: the database cannot be reached; schema_not_current: it is not "
    "migrated for this build",
}

_STORED = "The bundle was checked and stored for this attempt."
_REPEATED = "The same digest was already stored for this attempt (an idempotent repeat)."


@router.put(
    "/{run_id}/changes",
    operation_id="uploadChanges",
    status_code=201,
    response_model=ChangesStored,
    responses={
        201: {"description": _STORED},
        200: {"model": ChangesStored, "description": _REPEATED},
        **{s: {"model": ErrorBody, "description": d} for s, d in _ERRORS.items()},
    },
    dependencies=[WORKER_CREDENTIAL],
    openapi_extra={
        "parameters": [
            {
                "name": CHANGES_DIGEST_HEADER,
                "in": "header",
                "required": True,
                "description": "`sha256:` and the 64 lowercase hex digits of SHA-256 over "
                "the body; it must be the body's digest",
                "schema": {"type": "string", "pattern": CHANGES_DIGEST_PATTERN},
            }
        ],
        "requestBody": {
            "required": True,
            "description": "The changes bundle (docs/changes.md): a git bundle of "
            "baseline..head_after with one prerequisite and the one ref "
            "refs/heads/rein/<run_id>/<attempt>",
            "content": {
                CHANGES_MEDIA_TYPE: {
                    "schema": {"type": "string", "contentMediaType": CHANGES_MEDIA_TYPE}
                }
            },
        },
    },
)
async def upload_changes(
    run_id: uuid.UUID,
    request: Request,
    response: Response,
    call: Worker,
    settings: Settings,
    worker_id: Annotated[WorkerId, Query()],
    attempt: Annotated[int, Query(ge=1, le=1_000_000)],
) -> dict[str, Any]:
    """Hand over the attempt's changes: fenced like a complete (the run claimed by
    `worker_id` at `attempt` under an unexpired lease), checked against the run's grant,
    stored once per attempt."""
    worker = call.worker_id(worker_id)
    if media_essence(request.headers.get("content-type")) != CHANGES_MEDIA_TYPE:
        raise QueueRefusal(
            RefusalCode.unsupported_media_type,
            f"the body must be {CHANGES_MEDIA_TYPE}, not "
            f"{request.headers.get('content-type', 'none')[:100]}",
        )
    bundle = await _read_bounded(request, settings.changes_max_bytes)
    claimed = request.headers.get(CHANGES_DIGEST_HEADER)
    if claimed is None or _DIGEST.match(claimed) is None:
        raise QueueRefusal(
            RefusalCode.changes_invalid,
            f"{CHANGES_DIGEST_HEADER} must be sha256:<64 lowercase hex digits> of the body",
        )
    stored, created = await call.queue.upload_changes(
        run_id, worker, attempt, bundle, claimed_digest=claimed
    )
    response.status_code = 201 if created else 200
    return stored


async def _read_bounded(request: Request, max_bytes: int) -> bytes:
    too_large = QueueRefusal(
        RefusalCode.changes_too_large,
        f"the bundle exceeds ACTIVITY_CORE_CHANGES_MAX_BYTES ({max_bytes} bytes)",
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)
