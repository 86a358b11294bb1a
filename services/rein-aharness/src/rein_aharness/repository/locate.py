"""Find a run's target repository under the configured repositories root.

`target_repo` (`owner/name`) names `<root>/owner/name` (a checkout or a bare
repository) or else `<root>/owner/name.git` (bare). The name must have the evidence
`target_repo` shape (ASCII name segments, no `.`/`..`), the resolved directory (symlinks
followed) must stay under the root, and it must be a repository's own top level: a plain
directory inside some enclosing repository is not a target.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import ops_evidence
from rein_aharness.repository.git import GitError, git_text

__all__ = ["Repository", "RepositoryNotFound", "inspect_repository", "resolve_repository"]


class RepositoryNotFound(Exception):
    """No usable repository for the run's target_repo; nothing was touched."""


@dataclass(frozen=True)
class Repository:
    target_repo: str
    path: Path  # the checkout's top level, or the bare repository directory
    common_dir: Path  # where refs, objects and worktree metadata live
    # Ref namespaces someone other than the approach moves while it runs (besides the
    # landing branches): a mirror's fetched refs, which another worker's fetch updates.
    unwatched: tuple[str, ...] = ()


def _candidates(root: Path, target_repo: str) -> list[Path]:
    return [root / target_repo, root / f"{target_repo}.git"]


async def resolve_repository(root: Path, target_repo: str) -> Repository:
    if ops_evidence.target_repo(target_repo) is None:
        raise RepositoryNotFound(f"target_repo {target_repo[:80]!r} is not an owner/name path")
    real_root = root.resolve()
    for candidate in _candidates(root, target_repo):
        if not candidate.exists():
            continue
        resolved = candidate.resolve()
        if not resolved.is_relative_to(real_root) or resolved == real_root:
            raise RepositoryNotFound(
                f"target_repo {target_repo!r} resolves outside the repositories root"
            )
        if not resolved.is_dir():
            raise RepositoryNotFound(f"target_repo {target_repo!r} is not a directory")
        return await inspect_repository(target_repo, resolved)
    raise RepositoryNotFound(f"target_repo {target_repo!r} is not under the repositories root")


async def inspect_repository(target_repo: str, path: Path) -> Repository:
    """`path` as `target_repo`'s repository, if it is a repository's own top level."""
    # Stop discovery at the candidate itself, so an enclosing repository is never found.
    ceiling = {"GIT_CEILING_DIRECTORIES": os.fspath(path.parent)}
    try:
        bare = await git_text(path, "rev-parse", "--is-bare-repository", env=ceiling)
        common = await git_text(
            path, "rev-parse", "--path-format=absolute", "--git-common-dir", env=ceiling
        )
        top = (
            await git_text(path, "rev-parse", "--path-format=absolute", "--git-dir", env=ceiling)
            if bare == "true"
            else await git_text(path, "rev-parse", "--show-toplevel", env=ceiling)
        )
    except GitError:
        raise RepositoryNotFound(f"target_repo {target_repo!r} is not a git repository") from None
    if Path(top).resolve() != path:
        raise RepositoryNotFound(f"target_repo {target_repo!r} is not a repository's top level")
    return Repository(target_repo=target_repo, path=path, common_dir=Path(common).resolve())
