"""Is the work in a worktree inside the run's grant? Inspect with git, then judge (pure).

Accepted only when all of these hold, checked in this order (the first failure is the
reason given):

1. no ref of the target repository changed (nothing published, no branch or tag made:
   see refs.py);
1b. no git metadata that steers git changed (config, hooks, info, alternates, the
   worktree's links: see metadata.py);
2. the worktree HEAD is a commit that descends from the baseline;
3. the commits between them form a chain without merges;
4. their number lies within the grant's `commit_count` (no grant: zero commits);
5. every path any of those commits touched (both sides of a rename or copy) is a valid
   repository path (no `.git` segment, ...) that the grant's `allowed_paths` allow;
6. the touched paths fit the evidence bounds, so Activity Core can see all of them.

Paths are gathered commit by commit, not from the net baseline..HEAD diff, so a file
written and then deleted again in a later commit still counts as touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from ops_contracts import RepositoryGrantV1, path_allowed, repository_path_error
from ops_contracts.grant import MAX_COMMIT_COUNT
from ops_evidence.fields import accepted_path_list
from rein_aharness.repository.git import GitError, git, git_text
from rein_aharness.repository.metadata import (
    MetadataSnapshot,
    changed_metadata,
    snapshot_metadata,
)
from rein_aharness.repository.refs import RefSnapshot, changed_refs, snapshot_refs
from rein_aharness.repository.worktree import Workspace

__all__ = ["Verdict", "WorkInspection", "inspect_work", "judge"]

_SHOWN = 3


@dataclass(frozen=True)
class WorkInspection:
    baseline: str
    head_after: str | None  # None when the worktree HEAD is not a commit
    descends: bool
    commit_count: int
    commits: tuple[str, ...]  # oldest first; listed only up to MAX_COMMIT_COUNT
    merges: bool
    paths: tuple[str, ...]  # sorted, unique
    ref_changes: tuple[str, ...]
    refs_after: RefSnapshot
    metadata_changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reason: str | None = None


async def inspect_work(
    workspace: Workspace, refs_before: RefSnapshot, metadata_before: MetadataSnapshot
) -> WorkInspection:
    refs_after = await snapshot_refs(workspace.repository)
    changes = tuple(changed_refs(refs_before, refs_after))
    metadata_after = await anyio.to_thread.run_sync(snapshot_metadata, workspace)
    metadata_changes = tuple(changed_metadata(metadata_before, metadata_after))
    baseline = workspace.baseline
    env = workspace.git_env()

    def result(**fields: object) -> WorkInspection:
        base: dict[str, object] = {
            "baseline": baseline,
            "head_after": None,
            "descends": False,
            "commit_count": 0,
            "commits": (),
            "merges": False,
            "paths": (),
            "ref_changes": changes,
            "refs_after": refs_after,
            "metadata_changes": metadata_changes,
        }
        base.update(fields)
        return WorkInspection(**base)  # type: ignore[arg-type]

    try:
        head = await git_text(workspace.path, "rev-parse", "--verify", "HEAD^{commit}", env=env)
    except GitError:
        return result()
    if not await _is_ancestor(workspace, baseline, head):
        return result(head_after=head)
    span = f"{baseline}..{head}"
    count = int(await git_text(workspace.path, "rev-list", "--count", span, env=env))
    merges = bool(await git_text(workspace.path, "rev-list", "--min-parents=2", span, env=env))
    if count > MAX_COMMIT_COUNT or merges:
        return result(head_after=head, descends=True, commit_count=count, merges=merges)
    listed = await git_text(workspace.path, "rev-list", "--reverse", span, env=env)
    commits = tuple(listed.split()) if listed else ()
    paths: set[str] = set()
    for commit in commits:
        paths.update(await _touched_paths(workspace, commit))
    return result(
        head_after=head,
        descends=True,
        commit_count=count,
        commits=commits,
        merges=False,
        paths=tuple(sorted(paths)),
    )


async def _is_ancestor(workspace: Workspace, ancestor: str, descendant: str) -> bool:
    try:
        await git(
            workspace.path,
            "merge-base",
            "--is-ancestor",
            ancestor,
            descendant,
            env=workspace.git_env(),
        )
    except GitError as exc:
        if exc.returncode == 1:
            return False
        raise
    return True


async def _touched_paths(workspace: Workspace, commit: str) -> set[str]:
    raw = await git(
        workspace.path,
        "diff-tree",
        "-r",
        "-z",
        "-M",
        "-C",
        "--no-commit-id",
        "--name-status",
        commit,
        env=workspace.git_env(),
    )
    fields = raw.decode("utf-8", "surrogateescape").split("\x00")
    paths: set[str] = set()
    index = 0
    while index < len(fields) and fields[index]:
        status = fields[index]
        width = 2 if status[:1] in ("R", "C") else 1
        paths.update(fields[index + 1 : index + 1 + width])
        index += 1 + width
    return paths


def _shown(paths: list[str]) -> str:
    listed = ", ".join(repr(path[:120]) for path in paths[:_SHOWN])
    more = len(paths) - _SHOWN
    return listed + (f" and {more} more" if more > 0 else "")


def judge(inspection: WorkInspection, grant: RepositoryGrantV1 | None) -> Verdict:
    if inspection.ref_changes:
        return Verdict(
            False,
            "the approach changed refs of the target repository (publishing, branching and "
            f"tagging are not granted): {_shown(list(inspection.ref_changes))}",
        )
    if inspection.metadata_changes:
        return Verdict(
            False,
            "the approach changed the repository's git metadata (hooks, config and the "
            f"worktree's links are not its to change): {_shown(list(inspection.metadata_changes))}",
        )
    if inspection.head_after is None:
        return Verdict(False, "the worktree HEAD is not a commit")
    if not inspection.descends:
        return Verdict(False, "the worktree HEAD does not descend from the baseline commit")
    if inspection.merges:
        return Verdict(False, "the work contains a merge commit; only a linear chain is accepted")
    count = inspection.commit_count
    if grant is None:
        if count:
            return Verdict(
                False, f"the run carries no repository grant and may not commit ({count} commits)"
            )
        return Verdict(True)
    bounds = grant.commit_count
    if not bounds.min <= count <= bounds.max:
        return Verdict(
            False,
            f"{count} commits is outside the grant's commit_count {bounds.min}..{bounds.max}",
        )
    invalid = [path for path in inspection.paths if repository_path_error(path) is not None]
    if invalid:
        first = repository_path_error(invalid[0])
        return Verdict(False, f"the work touches invalid paths ({first}): {_shown(invalid)}")
    outside = [path for path in inspection.paths if not path_allowed(grant, path)]
    if outside:
        return Verdict(
            False, f"the work touches paths outside the grant's allowed_paths: {_shown(outside)}"
        )
    if accepted_path_list(list(inspection.paths)) is None:
        return Verdict(
            False,
            f"the work touches {len(inspection.paths)} paths, more than the evidence can report",
        )
    return Verdict(True)
