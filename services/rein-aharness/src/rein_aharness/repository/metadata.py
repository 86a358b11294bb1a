"""Git metadata the approach must not change, fingerprinted before and compared after.

What can make git run code or change what it does, or point it elsewhere: the
repository's `config`, `config.worktree`, `hooks/`, `info/` (attributes, excludes,
sparse-checkout), `objects/info/` (alternates), the run's worktree entry (`commondir`,
`gitdir`, `config.worktree`) and the worktree's own `.git` file. A bwrap sandbox shows
none of them writable: `info/` and `objects/info/` read-only, a config of its own instead
of the repository's (sandbox/gitview.py), no `hooks/` and no common `config.worktree` at
all, and the entry's `config.worktree` (created empty with the worktree) read-only; so a
change means the sandbox was bypassed (or was `none`); acceptance refuses the run either
way. New objects and the run's own HEAD, index and logs are the
only git metadata an approach may write; refs are compared separately (refs.py).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from rein_aharness.repository.worktree import Workspace

__all__ = ["MetadataSnapshot", "changed_metadata", "snapshot_metadata"]

MetadataSnapshot = Mapping[str, str]

_COMMON_FILES = ("config", "config.worktree")
_COMMON_TREES = ("hooks", "info", "objects/info")
_ADMIN_FILES = ("commondir", "gitdir", "config.worktree")
# A tree larger than this is reported as such rather than walked to the end.
_MAX_ENTRIES = 10_000


def _fingerprint(path: Path) -> str:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return f"link:{os.readlink(path)}"
    if stat.S_ISDIR(info.st_mode):
        return f"dir:{mode:o}"
    if not stat.S_ISREG(info.st_mode):
        return f"special:{stat.S_IFMT(info.st_mode):o}"
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    return f"file:{mode:o}:{digest.hexdigest()}"


def _walk(root: Path) -> Iterator[Path]:
    yield root
    if root.is_symlink() or not root.is_dir():
        return
    for directory, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            yield Path(directory) / name


def snapshot_metadata(workspace: Workspace) -> dict[str, str]:
    """Fingerprint of every watched path (blocking: run it in a thread)."""
    common = workspace.repository.common_dir
    watched: list[tuple[str, Path]] = [(f"$GIT_DIR/{n}", common / n) for n in _COMMON_FILES]
    for tree in _COMMON_TREES:
        for count, path in enumerate(_walk(common / tree)):
            if count >= _MAX_ENTRIES:
                watched.append((f"$GIT_DIR/{tree}/...", path))
                break
            watched.append((f"$GIT_DIR/{path.relative_to(common)}", path))
    admin = workspace.admin_dir
    watched += [(f"$GIT_DIR/worktrees/<run>/{n}", admin / n) for n in _ADMIN_FILES]
    watched.append(("<worktree>/.git", workspace.path / ".git"))
    return {name: _fingerprint(path) for name, path in watched}


def changed_metadata(before: MetadataSnapshot, after: MetadataSnapshot) -> list[str]:
    """Watched paths added, removed or changed, sorted."""
    return sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )
