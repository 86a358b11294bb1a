"""What a run changed (docs/changes.md), for operators and viewers (VIEWER_CREDENTIAL):

- `GET /ops-runs/{run_id}/changes`: the change view as JSON (changes/view.py);
- `GET /ops-runs/{run_id}/changes.patch`: the mbox of `git format-patch --stdout
  baseline..head_after`, which `git am` applies on the baseline;
- `GET /ops-runs/{run_id}/changes.bundle`: the stored bundle, byte for byte.

Each is of the run's current attempt's stored changes: 404 `not_found` without them; 422
`changes_invalid` when git cannot read the stored bundle (the bundle itself is still
served). Edge only: authenticate, parse, call operator/changes.py.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from starlette.responses import Response

from activity_core.changes.models import ChangesBody
from activity_core.changes.view import ChangesView
from activity_core.http.credentials import VIEWER_CREDENTIAL
from activity_core.http.deps import Changes
from activity_core.http.routes_operator import errors_of
from activity_core.operator.changes import StoredChanges

__all__ = ["BUNDLE_MEDIA_TYPE", "PATCH_MEDIA_TYPE", "bundle_response", "patch_response", "router"]

router = APIRouter(prefix="/ops-runs", tags=["operator"])

PATCH_MEDIA_TYPE = "application/mbox"
BUNDLE_MEDIA_TYPE = "application/x-git-bundle"

_ERRORS = errors_of(
    401,
    403,
    404,
    422,
    503,
    s404="not_found: no such run, or no changes stored for its current attempt",
    s422="invalid_request: a run id that is no UUID; changes_invalid: git cannot read the "
    "stored bundle (the detail says what git said)",
)
# the bundle is served as stored: git never reads it
_BUNDLE_ERRORS = {**_ERRORS, **errors_of(422, s422="invalid_request: a run id that is no UUID")}


def _file_name(stored: StoredChanges, suffix: str) -> str:
    return f"rein-{stored.run_id}-{stored.attempt}.{suffix}"


def patch_response(stored: StoredChanges, patch: bytes) -> Response:
    return Response(
        patch,
        media_type=PATCH_MEDIA_TYPE,
        headers={
            "Content-Disposition": f'attachment; filename="{_file_name(stored, "patch")}"',
            "X-Changes-Digest": stored.digest,
        },
    )


def bundle_response(stored: StoredChanges) -> Response:
    return Response(
        stored.bundle,
        media_type=BUNDLE_MEDIA_TYPE,
        headers={
            "Content-Disposition": f'attachment; filename="{_file_name(stored, "bundle")}"',
            "X-Changes-Digest": stored.digest,
        },
    )


@router.get(
    "/{run_id}/changes",
    operation_id="getRunChanges",
    response_model=ChangesBody,
    responses=_ERRORS,
    dependencies=[VIEWER_CREDENTIAL],
)
async def get_changes(run_id: uuid.UUID, changes: Changes) -> ChangesView:
    """What the run's current attempt changed, derived with git from its stored bundle:
    its commits (oldest first), its files (status added, modified, deleted, renamed or
    type_changed; +/- line counts; binary) and each file's unified diff. Bounded: at most
    300 files, 64 KiB of one file's diff and 1 MiB in all; past a bound `truncated` is
    true and `note` says which bound. `publication` is the run's publication (state, ref,
    commit, pull request, error), null until one is asked for."""
    return await changes.view(run_id)


@router.get(
    "/{run_id}/changes.patch",
    operation_id="getRunChangesPatch",
    response_class=Response,
    responses={
        200: {
            "description": "the mbox of git format-patch --stdout baseline..head_after",
            "content": {PATCH_MEDIA_TYPE: {"schema": {"type": "string"}}},
        },
        **_ERRORS,
    },
    dependencies=[VIEWER_CREDENTIAL],
)
async def get_changes_patch(run_id: uuid.UUID, changes: Changes) -> Response:
    """The run's commits as an mbox (`git format-patch --stdout baseline..head_after`):
    `git am` applies it on the baseline. Over 64 MiB it is refused (changes_invalid): the
    bundle carries the same commits."""
    stored = await changes.require(run_id)
    return patch_response(stored, await changes.patch_of(stored))


@router.get(
    "/{run_id}/changes.bundle",
    operation_id="getRunChangesBundle",
    response_class=Response,
    responses={
        200: {
            "description": "the stored changes bundle, byte for byte (X-Changes-Digest: its "
            "digest); `git fetch <file>` in a clone that has the baseline",
            "content": {BUNDLE_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        },
        **_BUNDLE_ERRORS,
    },
    dependencies=[VIEWER_CREDENTIAL],
)
async def get_changes_bundle(run_id: uuid.UUID, changes: Changes) -> Response:
    """The run's current attempt's changes bundle as the worker uploaded it."""
    return bundle_response(await changes.require(run_id))
