"""Where accepted work lands: a branch `rein/<run-id>/<attempt>` in the target repository.

Accepted commits are never merged or fast-forwarded into any existing branch and never
pushed (v1 grants forbid publication). Landing creates one new local branch pointing at
`head_after`, with a create-only ref update under the repository lock, so it is atomic
and a second landing of the same attempt can only confirm the same commit. The checked-out
branch and working tree of the target repository are untouched; whoever publishes or
merges reviews `rein/<run-id>/<attempt>` from there.

Per attempt, not per run: a run whose lease expired mid-work is claimed again with a new
attempt number, and its earlier, unreported attempt (if it landed before the worker died)
stays visible beside it instead of being overwritten.

`discard_landing` removes an attempt's branch again when its run will not be closed as
succeeded: its lease was lost, or an operator cancelled it before its close arrived.
"""

from __future__ import annotations

from rein_aharness.repository.git import GitError, git, git_text
from rein_aharness.repository.locate import Repository
from rein_aharness.repository.worktree import Workspace, repository_lock

__all__ = ["LandingError", "discard_landing", "import_objects", "land", "landing_ref"]


class LandingError(Exception):
    """The landing branch exists and points elsewhere; nothing was changed."""


async def import_objects(workspace: Workspace, head_after: str) -> None:
    """Copy the objects of accepted work into the repository, checked.

    The approach wrote its objects to the run's private object directory (it cannot write
    the repository's). Only what `head_after` reaches beyond the baseline is packed, and
    `index-pack --strict` refuses a malformed object or a missing link, so nothing else
    the approach left there (or crafted) reaches the repository.
    """
    wanted = f"{head_after}\n^{workspace.baseline}\n".encode("ascii")
    pack = await git(
        workspace.path,
        "pack-objects",
        "--revs",
        "--stdout",
        "-q",
        env=workspace.git_env(),
        stdin=wanted,
    )
    # Under the lock: a mirror's fetch (mirror.py) removes pack files it did not find
    # when it started, should it fail.
    async with repository_lock(workspace.repository):
        await git(workspace.repository.path, "index-pack", "--stdin", "--strict", stdin=pack)


def landing_ref(run_id: str, attempt: int) -> str:
    return f"refs/heads/rein/{run_id}/{attempt}"


async def land(repository: Repository, head_after: str, run_id: str, attempt: int) -> str:
    """Create the landing branch at `head_after`; return its full ref name."""
    ref = landing_ref(run_id, attempt)
    await git(repository.path, "check-ref-format", ref)
    async with repository_lock(repository):
        try:
            await git(repository.path, "update-ref", "--no-deref", ref, head_after, "")
        except GitError:
            try:
                current = await git_text(repository.path, "rev-parse", "--verify", ref)
            except GitError:
                current = None
            if current != head_after:
                raise LandingError(f"{ref} already exists at another commit") from None
    return ref


async def discard_landing(repository: Repository, run_id: str, attempt: int) -> str | None:
    """Delete `rein/<run-id>/<attempt>` if it exists; the commit it pointed at, or None.

    The name belongs to this attempt alone (a later claim lands under its own attempt),
    so whatever it points at is this attempt's work.
    """
    ref = landing_ref(run_id, attempt)
    await git(repository.path, "check-ref-format", ref)
    async with repository_lock(repository):
        try:
            current = await git_text(repository.path, "rev-parse", "--verify", "-q", ref)
        except GitError:
            return None
        await git(repository.path, "update-ref", "-d", ref, current)
    return current
