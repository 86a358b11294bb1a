"""A reference builder of changes bundles (docs/changes.md), with plain git commands.

The worker writes these bundles in production; activity-core's tests need real ones (and
tampered ones) without the worker. `build_changes_bundle` follows the contract step by
step, so a test can read it as the format's executable description:

- the objects: every commit of `baseline..tip` (first-parent), the baseline commit, the
  root tree of each of them, and for every commit against its parent both sides of
  `git diff-tree -r -t --no-renames` (gitlinks and the zero id skipped);
- the pack: `git pack-objects --stdout` of exactly those objects (non-thin);
- the header: `# v2 git bundle` (or v3 with `@object-format=sha256`), `-<baseline>`,
  `<tip> refs/heads/rein/<run_id>/<attempt>`, an empty line.

Its keyword arguments make the tampered variants a verifier must refuse; the named
helpers below say which is which. `make_repository` and `commit_files` build the history.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "IDENTITY",
    "build_changes_bundle",
    "bundle_digest",
    "bundle_from_other_history",
    "bundle_of_another_attempt",
    "bundle_with_merges",
    "bundle_with_ref_tip",
    "changes_ref_name",
    "commit_files",
    "garbage_bundle",
    "git",
    "make_repository",
]

IDENTITY: Mapping[str, str] = {
    "GIT_AUTHOR_NAME": "changes-builder",
    "GIT_AUTHOR_EMAIL": "changes-builder@example.invalid",
    "GIT_COMMITTER_NAME": "changes-builder",
    "GIT_COMMITTER_EMAIL": "changes-builder@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}
_ZERO_IDS = ("0" * 40, "0" * 64)
_GITLINK = "160000"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(IDENTITY)
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"})
    return env


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """`git -C repo args`, its stdout; a failure raises with git's stderr."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin,
        capture_output=True,
        env=_env(),
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace')}")
    return done.stdout


def _text(repo: Path, *args: str) -> str:
    return git(repo, *args).decode().strip()


def make_repository(path: Path, *, object_format: str = "sha1") -> str:
    """A repository at `path` with one commit (README.md): its id, the usual baseline."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "--quiet", "--initial-branch=main", f"--object-format={object_format}")
    return commit_files(path, {"README.md": "hello\n"}, "baseline")


def commit_files(
    repo: Path,
    files: Mapping[str, str | bytes | None],
    message: str,
    *,
    parents: tuple[str, ...] | None = None,
) -> str:
    """A commit on HEAD writing `files` (None deletes a path); its id. With `parents`,
    a commit with exactly those parents (a merge when two), HEAD moved to it."""
    for name, content in files.items():
        target = repo / name
        if content is None:
            git(repo, "rm", "--quiet", "--", name)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        git(repo, "add", "--", name)
    if parents is None:
        git(repo, "commit", "--quiet", "--allow-empty", "-m", message)
        return _text(repo, "rev-parse", "HEAD")
    tree = _text(repo, "write-tree")
    args = ["commit-tree", tree, "-m", message]
    for parent in parents:
        args += ["-p", parent]
    commit = _text(repo, *args)
    git(repo, "update-ref", "HEAD", commit)
    git(repo, "reset", "--quiet", "--hard", commit)
    return commit


def changes_ref_name(run_id: str, attempt: int) -> str:
    return f"refs/heads/rein/{run_id}/{attempt}"


def bundle_digest(bundle: bytes) -> str:
    return "sha256:" + hashlib.sha256(bundle).hexdigest()


def build_changes_bundle(
    repo: Path,
    baseline: str,
    tip: str,
    run_id: str,
    attempt: int,
    *,
    ref_name: str | None = None,
    ref_tip: str | None = None,
    prerequisite: str | None = None,
    first_parent: bool = True,
    extra_objects: tuple[str, ...] = (),
) -> bytes:
    """The changes bundle of `baseline..tip` for the run's attempt, per docs/changes.md.

    Tampering: `ref_name` (another ref than the attempt's), `ref_tip` (the ref line names
    another commit than the pack's tip), `prerequisite` (the header names another
    baseline than the history's), `first_parent=False` (every commit of the range and its
    diff against every parent, so a merge's second-parent history rides along),
    `extra_objects` (packed too, e.g. the commit a false prerequisite names)."""
    rev_list = ["rev-list", "--reverse", f"{baseline}..{tip}"]
    if first_parent:
        rev_list.insert(1, "--first-parent")
    commits = _text(repo, *rev_list).split()
    objects: list[str] = [*commits, baseline, *extra_objects]
    for commit in [baseline, *commits]:
        objects.append(_text(repo, "rev-parse", f"{commit}^{{tree}}"))
    for commit in commits:
        parents = _text(repo, "rev-list", "--parents", "-n", "1", commit).split()[1:]
        for parent in parents if not first_parent else parents[:1]:
            objects += _changed_objects(repo, parent, commit)
    listed = "".join(f"{oid}\n" for oid in dict.fromkeys(objects))
    pack = git(repo, "pack-objects", "--stdout", "--quiet", stdin=listed.encode())
    sha256 = _text(repo, "rev-parse", "--show-object-format") == "sha256"
    header = "# v3 git bundle\n@object-format=sha256\n" if sha256 else "# v2 git bundle\n"
    header += f"-{prerequisite or baseline}\n"
    header += f"{ref_tip or tip} {ref_name or changes_ref_name(run_id, attempt)}\n\n"
    return header.encode() + pack


def _changed_objects(repo: Path, parent: str, commit: str) -> list[str]:
    """Both sides of every change of `commit` against `parent`, trees along the paths
    included (-t), gitlinks and the zero id (an added or deleted side) left out."""
    out = git(repo, "diff-tree", "-r", "-t", "--no-renames", "-z", parent, commit)
    found: list[str] = []
    # -z: ":<old mode> <new mode> <old id> <new id> <status>\0<path>\0" per entry
    fields = out.split(b"\0")
    for meta in fields[0::2]:
        if not meta.startswith(b":"):
            continue
        old_mode, new_mode, old_id, new_id, _status = meta[1:].decode().split(" ")
        for mode, oid in ((old_mode, old_id), (new_mode, new_id)):
            if mode != _GITLINK and oid not in _ZERO_IDS:
                found.append(oid)
    return found


def bundle_of_another_attempt(
    repo: Path, baseline: str, tip: str, run_id: str, attempt: int
) -> bytes:
    """A genuine bundle, but of the run's attempt `attempt + 1`."""
    return build_changes_bundle(repo, baseline, tip, run_id, attempt + 1)


def bundle_with_ref_tip(
    repo: Path, baseline: str, tip: str, run_id: str, attempt: int, ref_tip: str
) -> bytes:
    """The pack of `baseline..tip`, the ref line naming `ref_tip` instead."""
    return build_changes_bundle(repo, baseline, tip, run_id, attempt, ref_tip=ref_tip)


def bundle_from_other_history(
    repo: Path, baseline: str, tip: str, run_id: str, attempt: int, claimed_baseline: str
) -> bytes:
    """The history `baseline..tip`, the header claiming it starts at `claimed_baseline`."""
    return build_changes_bundle(repo, baseline, tip, run_id, attempt, prerequisite=claimed_baseline)


def bundle_with_merges(repo: Path, baseline: str, tip: str, run_id: str, attempt: int) -> bytes:
    """Every commit of `baseline..tip`, merges and their second parents' history with it."""
    return build_changes_bundle(repo, baseline, tip, run_id, attempt, first_parent=False)


def garbage_bundle(kind: str) -> bytes:
    """Bytes that are not a changes bundle: `text`, `signature_only`, `bad_pack`, `binary`."""
    ref = "0" * 39 + "1"
    return {
        "text": b"this is not a bundle\n",
        "signature_only": b"# v2 git bundle\n",
        "bad_pack": f"# v2 git bundle\n-{'a' * 40}\n{ref} refs/heads/x\n\nPACK".encode()
        + b"\x00\x00\x00\x02\x00\x00\x00\x01garbage",
        "binary": bytes(range(256)) * 8,
    }[kind]
