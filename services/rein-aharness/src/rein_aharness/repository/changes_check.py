"""Is a changes bundle from a remote Glas the one its result describes? (docs/changes.md)

The worker hands activity-core bytes it did not write, so it checks them first, locally
and cheaply, against the facts of the GatewayResult it is about to close with:

1. the header, as bytes: exactly the one our own writer produces (changes_bundle.py),
   `# v2 git bundle` for a SHA-1 baseline or `# v3 git bundle` with
   `@object-format=sha256`, one prerequisite `-<baseline>` (the result's
   `baseline_digest`), one ref `<head_after> refs/heads/rein/<run>/<attempt>` (the
   result's `head_after`, this attempt's ref), then an empty line and `PACK`;
2. the pack, indexed into an empty scratch repository (`git index-pack --stdin
   --fsck-objects`, no hooks, no config but ours, no transport: repository/git.py);
3. the history, one commit at a time from `head_after` (never past the baseline, whose
   parents the scratch repository lacks): a first-parent chain without merges that is
   exactly the result's `accepted_commits`, and every path each commit touches allowed
   by the grant.

Anything else is `ChangesInvalid` with the reason; the caller rejects the work. So the
checks activity-core makes at upload can only fail here first, where the run still
gets a definite failed close, rather than in delivery, where the close would be
quarantined. Bounded: the header in 1 KiB, the history in the grant's commit_count.max
steps, every git call in `_TIMEOUT_S`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio

from ops_contracts import RepositoryGrantV1, path_allowed
from rein_aharness.repository.git import GitError, git
from rein_aharness.repository.landing import landing_ref

__all__ = ["ChangesInvalid", "check_changes_bundle"]

_MAX_HEADER_BYTES = 1024
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_TIMEOUT_S = 60.0


class ChangesInvalid(Exception):
    """The bundle is not the one the result describes; `reason` says how."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _expected_header(baseline: str, head: str, ref: str) -> bytes:
    if len(baseline) == 64:
        signature = "# v3 git bundle\n@object-format=sha256\n"
    else:
        signature = "# v2 git bundle\n"
    return f"{signature}-{baseline}\n{head} {ref}\n\n".encode("ascii")


def _header_problem(data: bytes, baseline: str, head: str, ref: str) -> str | None:
    end = data.find(b"\n\n", 0, _MAX_HEADER_BYTES)
    if not data.startswith((b"# v2 git bundle\n", b"# v3 git bundle\n")) or end < 0:
        return "not a git bundle"
    lines = data[:end].split(b"\n")
    prerequisites = [line for line in lines if line.startswith(b"-")]
    refs = [line for line in lines[1:] if not line.startswith((b"-", b"@"))]
    if prerequisites != [f"-{baseline}".encode()]:
        return "the bundle's prerequisite is not the result's baseline"
    if len(refs) != 1:
        return f"the bundle has {len(refs)} refs; it must have exactly one"
    tip, _, name = refs[0].partition(b" ")
    if name != ref.encode():
        shown = name[:120].decode("ascii", "backslashreplace")
        return f"the bundle's ref is {shown!r}, not this attempt's {ref}"
    if tip != head.encode():
        return "the bundle's tip is not the result's head_after"
    if data[: end + 2] != _expected_header(baseline, head, ref):
        return "the bundle's header is not a changes bundle header"
    if not data.startswith(b"PACK", end + 2):
        return "the bundle's pack does not start with a PACK signature"
    return None


async def check_changes_bundle(
    data: bytes,
    *,
    run_id: str,
    attempt: int,
    baseline: str,
    head_after: str,
    commits: Sequence[str],
    grant: RepositoryGrantV1,
) -> None:
    """ChangesInvalid unless `data` is the changes bundle of the module docstring."""
    if not (
        _OBJECT_ID.fullmatch(baseline)
        and _OBJECT_ID.fullmatch(head_after)
        and len(baseline) == len(head_after)
    ):
        raise ChangesInvalid("the result's baseline or head_after is not an object id")
    ref = landing_ref(run_id, attempt)
    problem = _header_problem(data, baseline, head_after, ref)
    if problem is not None:
        raise ChangesInvalid(problem)
    pack = data[data.index(b"\n\n") + 2 :]
    scratch = Path(await anyio.to_thread.run_sync(lambda: tempfile.mkdtemp(prefix="rein-check-")))
    try:
        with anyio.fail_after(_TIMEOUT_S):
            await _check_pack(scratch, pack, baseline, head_after, commits, grant)
    except TimeoutError:
        raise ChangesInvalid("checking the bundle took too long") from None
    finally:
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(scratch, ignore_errors=True))


async def _check_pack(
    scratch: Path,
    pack: bytes,
    baseline: str,
    head: str,
    commits: Sequence[str],
    grant: RepositoryGrantV1,
) -> None:
    object_format = "sha256" if len(baseline) == 64 else "sha1"
    repo = scratch / "repo.git"
    await git(
        scratch,
        "init",
        "-q",
        "--bare",
        "--template=",
        f"--object-format={object_format}",
        "repo.git",
    )
    try:
        await git(repo, "index-pack", "--stdin", "--fsck-objects", stdin=pack)
    except GitError as exc:
        raise ChangesInvalid(f"the bundle's pack is not valid: {exc.stderr[:200]}") from None
    chain = await _first_parent_chain(repo, baseline, head, grant.commit_count.max)
    if chain != list(commits):
        raise ChangesInvalid("the bundle's commits are not the result's accepted_commits")
    parent = baseline
    for commit in chain:
        for path in await _touched_paths(repo, parent, commit):
            if not path_allowed(grant, path):
                shown = path.encode("utf-8", "backslashreplace").decode("ascii", "replace")
                raise ChangesInvalid(
                    f"commit {commit} touches {shown[:200]!r}, outside the grant's allowed_paths"
                )
        parent = commit


async def _first_parent_chain(repo: Path, baseline: str, head: str, limit: int) -> list[str]:
    """baseline..head oldest first, walked from head one commit at a time."""
    chain: list[str] = []
    current = head
    while current != baseline:
        if len(chain) >= limit:
            raise ChangesInvalid(
                f"the tip is more than the grant's {limit} commits from the baseline "
                "(or does not descend from it)"
            )
        try:
            raw = await git(repo, "cat-file", "commit", current)
        except GitError:
            raise ChangesInvalid(
                f"commit {current} is not in the bundle (the history does not reach the baseline)"
            ) from None
        headers, _, _ = raw.partition(b"\n\n")
        parents = [
            line.removeprefix(b"parent ").decode("ascii", "replace")
            for line in headers.split(b"\n")
            if line.startswith(b"parent ")
        ]
        if len(parents) != 1:
            what = "a merge" if parents else "a root commit"
            raise ChangesInvalid(f"commit {current} is {what}; the changes must be a chain")
        chain.append(current)
        current = parents[0]
    chain.reverse()
    return chain


async def _touched_paths(repo: Path, parent: str, commit: str) -> list[str]:
    try:
        raw = await git(
            repo, "diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", "--name-only",
            parent, commit,
        )  # fmt: skip
    except GitError as exc:
        raise ChangesInvalid(
            f"the bundle lacks objects to diff commit {commit}: {exc.stderr[:200]}"
        ) from None
    return [p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0") if p]
