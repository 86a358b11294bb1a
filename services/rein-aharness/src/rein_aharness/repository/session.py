"""One run attempt's stay in a target repository: resolve (or, in remote mode, fetch
into its mirror: mirror.py), snapshot, worktree, clean up.

    async with worktree_session(root, worktrees_root, target_repo, name) as session:
        ... run the approach in session.workspace.path, inspect, maybe land ...

On the way out, whatever happened (an exception, a cancelled run, a lost lease), any ref
the approach changed is put back and the worktree is removed, shielded from
cancellation. Landing refs (`refs/heads/rein/`) are not part of the snapshot, so landed
work stays.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from rein_aharness.repository.git import GitError
from rein_aharness.repository.locate import Repository, resolve_repository
from rein_aharness.repository.metadata import MetadataSnapshot, snapshot_metadata
from rein_aharness.repository.mirror import ensure_mirror, fetch_baseline
from rein_aharness.repository.refs import (
    RefSnapshot,
    changed_refs,
    restore_refs,
    snapshot_refs,
)
from rein_aharness.repository.remote import RemoteSource
from rein_aharness.repository.worktree import Workspace, discard_workspace, open_workspace

__all__ = ["WorktreeSession", "worktree_session"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorktreeSession:
    repository: Repository
    workspace: Workspace
    refs_before: RefSnapshot
    metadata_before: MetadataSnapshot


@asynccontextmanager
async def worktree_session(
    repositories_root: Path,
    worktrees_root: Path,
    target_repo: str,
    name: str,
    source: RemoteSource | None = None,
    *,
    log_fields: Mapping[str, object] | None = None,
) -> AsyncIterator[WorktreeSession]:
    """Raises RepositoryNotFound (or, with a `source`, FetchFailed) before anything is
    created when the target is unusable (a new mirror stays: it is empty, and the next
    attempt fetches into it).

    `log_fields` (the run's `run_id` and `attempt`) go on the session's INFO lines,
    "repository fetched" (remote mode) and "worktree ready": the ends of two phases of
    bench/fire_to_start.py's fire-to-start latency."""
    fields = dict(log_fields or {})
    baseline: str | None = None
    if source is None:
        repository = await resolve_repository(repositories_root, target_repo)
    else:
        repository = await ensure_mirror(repositories_root, target_repo)
        baseline = await fetch_baseline(repository, source)
        log.info("repository fetched", extra={**fields, "baseline": baseline})
    refs_before = await snapshot_refs(repository)
    workspace = await open_workspace(repository, worktrees_root, name, baseline)
    try:
        metadata_before = await anyio.to_thread.run_sync(snapshot_metadata, workspace)
        log.info("worktree ready", extra=fields)
        yield WorktreeSession(repository, workspace, refs_before, metadata_before)
    finally:
        with anyio.CancelScope(shield=True):
            await _put_refs_back(repository, refs_before)
            await discard_workspace(workspace)


async def _put_refs_back(repository: Repository, before: RefSnapshot) -> None:
    try:
        after = await snapshot_refs(repository)
        if changed_refs(before, after):
            await restore_refs(repository, before, after)
    except GitError as exc:
        log.warning("could not check the target repository's refs: %s", exc)
