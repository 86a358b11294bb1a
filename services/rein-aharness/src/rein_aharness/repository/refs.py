"""What the refs of a repository are, and putting them back.

The approach runs in a linked worktree, which shares its refs with the target repository:
a `git branch`, `git tag` or `git push` there changes the target itself. The worker
snapshots every ref (and the main checkout's HEAD) before the approach and compares
after; any difference is a rejection, and `restore_refs` undoes it.

`refs/heads/rein/` is left out of the comparison: it is where workers land accepted work,
and another worker may land its own run there at any moment. So is a mirror's
`refs/remotes/origin/` (`Repository.unwatched`): another worker sharing the mirror may
fetch into it at any moment, and the sandbox shows refs read-only anyway.
"""

from __future__ import annotations

from collections.abc import Mapping

from rein_aharness.repository.git import GitError, git, git_text
from rein_aharness.repository.locate import Repository

__all__ = ["LANDING_NAMESPACE", "RefSnapshot", "changed_refs", "restore_refs", "snapshot_refs"]

LANDING_NAMESPACE = "refs/heads/rein/"
_HEAD = "HEAD"

RefSnapshot = Mapping[str, str]


async def snapshot_refs(repository: Repository) -> dict[str, str]:
    raw = await git(repository.path, "for-each-ref", "--format=%(refname)%00%(objectname)")
    refs: dict[str, str] = {}
    for line in raw.decode("utf-8", "surrogateescape").splitlines():
        name, _, value = line.partition("\x00")
        if not name.startswith((LANDING_NAMESPACE, *repository.unwatched)):
            refs[name] = value
    try:
        refs[_HEAD] = "ref: " + await git_text(repository.path, "symbolic-ref", "-q", _HEAD)
    except GitError:
        refs[_HEAD] = await git_text(repository.path, "rev-parse", "--verify", _HEAD)
    return refs


def changed_refs(before: RefSnapshot, after: RefSnapshot) -> list[str]:
    """Names added, removed or moved, sorted."""
    return sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )


async def restore_refs(repository: Repository, before: RefSnapshot, after: RefSnapshot) -> None:
    """Put every changed ref back to its snapshot value (delete the ones that are new).

    Each update names the value it expects, so a ref someone else moved meanwhile is
    left alone rather than clobbered. HEAD of the main checkout is not rewritten.
    """
    for name in changed_refs(before, after):
        if name == _HEAD:
            continue
        old, new = before.get(name), after.get(name)
        try:
            if old is None and new is not None:
                await git(repository.path, "update-ref", "-d", name, new)
            elif old is not None and new is None:
                await git(repository.path, "update-ref", name, old, "")
            elif old is not None and new is not None:
                await git(repository.path, "update-ref", name, old, new)
        except GitError:
            continue
