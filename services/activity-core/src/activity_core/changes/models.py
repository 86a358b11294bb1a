"""The JSON of `GET /ops-runs/{id}/changes` (docs/changes.md): response models for the
OpenAPI document. The route hands over a view.ChangesView; only the fields declared here
reach the body (a path's exact bytes stay out)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from activity_core.changes.view import ChangeStatus
from ops_contracts import RunPublication

__all__ = ["ChangedFile", "ChangesBody", "CommitBody"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class CommitBody(_Model):
    sha: str
    subject: str = Field(description="the first paragraph of the message, as one line")
    author_name: str
    author_email: str
    authored_at: datetime


class ChangedFile(_Model):
    path: str = Field(description="UTF-8 with replacement where git's bytes are not")
    old_path: str | None = Field(description="a rename's old path; null otherwise")
    status: ChangeStatus
    additions: int
    deletions: int
    binary: bool
    diff: str | None = Field(
        description="the file's unified diff from its first @@ line; null for a binary "
        "file or one past the bounds"
    )
    truncated: bool = Field(description="the diff is cut (or not shown): `note` says why")


class ChangesBody(_Model):
    run_id: str
    attempt: int = Field(description="the run's current attempt, whose changes these are")
    digest: str
    size: int
    baseline: str
    head_after: str
    stored_at: datetime
    commits: list[CommitBody] = Field(description="baseline..head_after, oldest first")
    files: list[ChangedFile]
    truncated: bool
    note: str | None = Field(description="which bound cut the view, when one did")
    publication: RunPublication | None = Field(
        default=None,
        description="the run's publication (POST /ops-runs/{id}/publish); null when none "
        "was asked for",
    )
