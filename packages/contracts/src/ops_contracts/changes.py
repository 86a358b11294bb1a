"""The hand-over of a run's changes (docs/changes.md): the wire names both sides use.

The worker uploads a changes bundle with `PUT /ops-runs/{run_id}/changes?worker_id=W&
attempt=N`, the bundle's bytes as the body (CHANGES_MEDIA_TYPE) and its digest in
CHANGES_DIGEST_HEADER; activity-core answers ChangesStored (201 stored, 200 already
stored with the same digest).
"""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import BaseModel, StringConstraints

__all__ = [
    "CHANGES_DIGEST_HEADER",
    "CHANGES_DIGEST_PATTERN",
    "CHANGES_MEDIA_TYPE",
    "ChangesDigest",
    "ChangesStored",
    "changes_ref_name",
]

CHANGES_MEDIA_TYPE = "application/x-git-bundle"
CHANGES_DIGEST_HEADER = "X-Changes-Digest"
# `sha256:` and the 64 lowercase hex digits of SHA-256 over the bundle's bytes
CHANGES_DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"

ChangesDigest = Annotated[str, StringConstraints(pattern=CHANGES_DIGEST_PATTERN)]
GitObjectId = Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$")]


def changes_ref_name(run_id: str | uuid.UUID, attempt: int) -> str:
    """The one ref a run's attempt lands, hands over and (once an operator asks) publishes."""
    return f"refs/heads/rein/{run_id}/{attempt}"


class ChangesStored(BaseModel):
    """The changes stored for one attempt of a run, as activity-core checked them."""

    run_id: uuid.UUID
    attempt: int
    digest: ChangesDigest
    size: int
    baseline: GitObjectId
    head_after: GitObjectId
    # baseline..head_after, oldest first
    commits: list[GitObjectId]
    # every path the commits touch (both sides of a rename), sorted
    paths: list[str]
