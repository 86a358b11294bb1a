"""The workflow's writes of a publication's outcome (queries.py says why each is an
upsert guarded by the workflow id) and the run's `publication` object (the projection
every answer shows)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import asyncpg

from activity_core.publication import queries
from activity_core.publication.payloads import PublishChangesInput, publication_workflow_id
from activity_core.publication.remote_git import changes_ref
from ops_evidence import sanitize_error

__all__ = ["project_publication", "record_failed", "record_published", "record_pull_request"]

PUBLIC_FIELDS = (
    "state",
    "ref",
    "commit",
    "pull_request_url",
    "error",
    "requested_by",
    "requested_at",
    "published_at",
)


def project_publication(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    shown = {key: row.get(key) for key in PUBLIC_FIELDS}
    if shown["error"] is not None:
        shown["error"] = sanitize_error(shown["error"])
    return shown


def _head(params: PublishChangesInput) -> tuple[Any, ...]:
    return (
        uuid.UUID(params.run_id),
        params.attempt,
        changes_ref(params.run_id, params.attempt),
        params.requested_by,
        datetime.fromisoformat(params.requested_at),
        publication_workflow_id(params.run_id),
    )


async def record_published(pool: asyncpg.Pool, params: PublishChangesInput, commit: str) -> None:
    await pool.execute(queries.RECORD_PUBLISHED, *_head(params), commit)


async def record_failed(pool: asyncpg.Pool, params: PublishChangesInput, reason: str) -> None:
    await pool.execute(queries.RECORD_FAILED, *_head(params), sanitize_error(reason))


async def record_pull_request(
    pool: asyncpg.Pool, params: PublishChangesInput, url: str | None, error: str | None
) -> None:
    await pool.execute(
        queries.RECORD_PULL_REQUEST,
        uuid.UUID(params.run_id),
        publication_workflow_id(params.run_id),
        url,
        sanitize_error(error) if error is not None else None,
    )
