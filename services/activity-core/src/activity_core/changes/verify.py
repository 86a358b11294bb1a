"""Is this bundle what the run's attempt may hand over? (docs/changes.md, Upload)

`verify_bundle` checks a changes bundle from its bytes alone: its header
(bundle_format.py), its one ref (`refs/heads/rein/<run_id>/<attempt>`: a bundle of another
attempt is refused), its pack indexed into an empty scratch repository (scratch_git.py),
then the history. `verify_history` is the history check alone, against any repository
that has the objects (a scratch one here; publication's clone of the remote, which checks
again and never trusts the stored bundle):

- a first-parent chain from the tip to the baseline, walked one commit at a time (so
  nothing reads past the baseline, whose parents a scratch repository does not have);
  a merge, a root commit or a chain longer than the grant's `commit_count.max` ends the
  walk with ChangesInvalid; a shorter one than `commit_count.min` is refused too;
- every path each commit touches against its parent, both sides of a rename
  (`--no-renames`), allowed by the grant (ops_contracts.path_allowed; a path that is not
  UTF-8 is never allowed).

Anything git cannot do with the objects (a missing tree or blob, a corrupt pack) is
ChangesInvalid too: the bundle is not self-contained as the contract says. A git call
that runs out of time is not the bundle's fault but our node's (an overloaded machine,
a slow disk): ChangesCheckUnavailable, which the upload answers 503 `unavailable` (the
worker retries), never a conclusive refusal. The time bound is the caller's `timeout_s`
(ACTIVITY_CORE_CHANGES_GIT_TIMEOUT_SECONDS for an upload). Output over its bound stays
ChangesInvalid: the same bytes always produce it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from activity_core.changes.bundle_format import ChangesInvalid, parse_bundle_header
from activity_core.changes.scratch_git import (
    GitFailed,
    GitOutputTooLarge,
    GitRunner,
    GitTimeout,
    ScratchGit,
)
from ops_contracts import RepositoryGrantV1, changes_ref_name, path_allowed

__all__ = [
    "ChangesCheckUnavailable",
    "ChangesInvalid",
    "VerifiedChanges",
    "VerifiedHistory",
    "bundle_digest",
    "changes_ref_name",
    "verify_bundle",
    "verify_history",
]

# A commit object's header is small; a hostile one could be large (a huge message).
_COMMIT_BYTES = 1 << 20
# -z name lists of one commit's changes: 1 MiB is thousands of paths, past any grant.
_PATHS_BYTES = 1 << 20
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class VerifiedHistory:
    commits: tuple[str, ...]  # baseline..tip, oldest first
    paths: tuple[str, ...]  # every path touched, sorted, each once


@dataclass(frozen=True)
class VerifiedChanges:
    digest: str
    size: int
    baseline: str
    head_after: str
    commits: tuple[str, ...]
    paths: tuple[str, ...]


def bundle_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class ChangesCheckUnavailable(Exception):
    """Transient: our git could not finish the check in time; the bundle may be valid."""


async def verify_bundle(
    data: bytes,
    *,
    run_id: str,
    attempt: int,
    grant: RepositoryGrantV1,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> VerifiedChanges:
    header = parse_bundle_header(data)
    expected_ref = changes_ref_name(run_id, attempt)
    if header.ref_name != expected_ref:
        raise ChangesInvalid(
            f"the bundle's ref is {header.ref_name[:120]!r}, not this attempt's {expected_ref}"
        )
    async with ScratchGit(object_format=header.object_format) as git:
        try:
            await git.index_pack(data[header.pack_offset :], timeout_s=timeout_s)
        except GitFailed as exc:
            raise ChangesInvalid(f"the bundle's pack is not valid: {_first_line(exc)}") from exc
        except GitTimeout as exc:
            raise ChangesCheckUnavailable("indexing the bundle's pack took too long") from exc
        history = await verify_history(git, header.baseline, header.tip, grant, timeout_s=timeout_s)
    return VerifiedChanges(
        digest=bundle_digest(data),
        size=len(data),
        baseline=header.baseline,
        head_after=header.tip,
        commits=history.commits,
        paths=history.paths,
    )


async def verify_history(
    git: GitRunner,
    baseline: str,
    tip: str,
    grant: RepositoryGrantV1,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> VerifiedHistory:
    """The history check of the module docstring, in the repository `git` runs in."""
    bounds = grant.commit_count
    if await _object_type(git, baseline, timeout_s) != "commit":
        raise ChangesInvalid("the baseline is not a commit the bundle holds")
    chain: list[tuple[str, str]] = []  # (commit, its parent), newest first
    current = tip
    while current != baseline:
        if len(chain) >= bounds.max:
            raise ChangesInvalid(
                f"the tip is more than the grant's {bounds.max} commits from the baseline "
                "(or does not descend from it)"
            )
        parents = await _parents(git, current, timeout_s)
        if not parents:
            raise ChangesInvalid("the history does not descend from the baseline")
        if len(parents) > 1:
            raise ChangesInvalid(f"commit {current} is a merge; the changes must be a chain")
        chain.append((current, parents[0]))
        current = parents[0]
    if len(chain) < bounds.min:
        raise ChangesInvalid(
            f"{len(chain)} commits is fewer than the grant's commit_count.min {bounds.min}"
        )
    chain.reverse()
    paths: set[str] = set()
    for commit, parent in chain:
        for path in await _touched_paths(git, parent, commit, timeout_s):
            if not path_allowed(grant, path):
                shown = path.encode("utf-8", "backslashreplace").decode("ascii", "replace")
                raise ChangesInvalid(
                    f"commit {commit} touches {shown[:200]!r}, outside the grant's allowed_paths"
                )
            paths.add(path)
    return VerifiedHistory(commits=tuple(c for c, _ in chain), paths=tuple(sorted(paths)))


async def _object_type(git: GitRunner, oid: str, timeout_s: float) -> str | None:
    try:
        out = await git.run("cat-file", "-t", oid, max_output_bytes=64, timeout_s=timeout_s)
    except GitFailed:
        return None
    except GitTimeout as exc:
        raise ChangesCheckUnavailable(f"git could not read object {oid} in time") from exc
    except GitOutputTooLarge as exc:
        raise ChangesInvalid(f"git could not read object {oid}") from exc
    return out.decode("ascii", "replace").strip()


async def _parents(git: GitRunner, commit: str, timeout_s: float) -> list[str]:
    raw = await _read(
        git,
        ("cat-file", "commit", commit),
        max_output_bytes=_COMMIT_BYTES,
        timeout_s=timeout_s,
        failed=lambda _: (
            f"commit {commit} is not in the bundle (the history does not reach the baseline)"
        ),
        late=f"commit {commit} could not be read in time",
        too_large=f"commit {commit} could not be read within bounds",
    )
    head, _, _ = raw.partition(b"\n\n")
    return [
        line.removeprefix(b"parent ").decode("ascii", "replace")
        for line in head.split(b"\n")
        if line.startswith(b"parent ")
    ]


async def _touched_paths(git: GitRunner, parent: str, commit: str, timeout_s: float) -> list[str]:
    raw = await _read(
        git,
        ("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", "--name-only", parent, commit),
        max_output_bytes=_PATHS_BYTES,
        timeout_s=timeout_s,
        failed=lambda exc: f"the bundle lacks objects to diff commit {commit}: {_first_line(exc)}",
        late=f"commit {commit} could not be diffed in time",
        too_large=f"commit {commit} changes more than can be checked",
    )
    return [p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0") if p]


async def _read(
    git: GitRunner,
    args: tuple[str, ...],
    *,
    max_output_bytes: int,
    timeout_s: float,
    failed: Callable[[GitFailed], str],
    late: str,
    too_large: str,
) -> bytes:
    """`git args`'s output; what git could not do as the module docstring says: a failure
    (`failed` says what it means) or too much output is ChangesInvalid, running out of time
    ChangesCheckUnavailable (`late`)."""
    try:
        return await git.run(*args, max_output_bytes=max_output_bytes, timeout_s=timeout_s)
    except GitFailed as exc:
        raise ChangesInvalid(failed(exc)) from exc
    except GitTimeout as exc:
        raise ChangesCheckUnavailable(late) from exc
    except GitOutputTooLarge as exc:
        raise ChangesInvalid(too_large) from exc


def _first_line(exc: GitFailed) -> str:
    return (exc.stderr.splitlines() or [""])[0][:200]
