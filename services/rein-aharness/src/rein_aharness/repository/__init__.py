"""Repository work inside the grant: worktrees, acceptance, landing (git, no network)."""

from rein_aharness.repository.acceptance import Verdict, WorkInspection, inspect_work, judge
from rein_aharness.repository.changes_bundle import (
    ChangesBundle,
    ChangesTooLarge,
    write_changes_bundle,
)
from rein_aharness.repository.git import GitError, git, git_environment
from rein_aharness.repository.landing import (
    LandingError,
    discard_landing,
    import_objects,
    land,
    landing_ref,
)
from rein_aharness.repository.locate import Repository, RepositoryNotFound, resolve_repository
from rein_aharness.repository.metadata import changed_metadata, snapshot_metadata
from rein_aharness.repository.mirror import (
    FetchFailed,
    FetchFailure,
    ensure_mirror,
    existing_mirror,
    fetch_baseline,
)
from rein_aharness.repository.refs import changed_refs, restore_refs, snapshot_refs
from rein_aharness.repository.remote import RemoteSource
from rein_aharness.repository.session import WorktreeSession, worktree_session
from rein_aharness.repository.worktree import (
    Workspace,
    discard_workspace,
    open_workspace,
    sweep_worktrees,
)

__all__ = [
    "ChangesBundle",
    "ChangesTooLarge",
    "FetchFailed",
    "FetchFailure",
    "GitError",
    "LandingError",
    "RemoteSource",
    "Repository",
    "RepositoryNotFound",
    "Verdict",
    "WorkInspection",
    "Workspace",
    "WorktreeSession",
    "changed_metadata",
    "changed_refs",
    "discard_landing",
    "discard_workspace",
    "ensure_mirror",
    "existing_mirror",
    "fetch_baseline",
    "git",
    "git_environment",
    "import_objects",
    "inspect_work",
    "judge",
    "land",
    "landing_ref",
    "open_workspace",
    "resolve_repository",
    "restore_refs",
    "snapshot_metadata",
    "snapshot_refs",
    "sweep_worktrees",
    "worktree_session",
    "write_changes_bundle",
]
