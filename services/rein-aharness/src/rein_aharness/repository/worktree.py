"""A fresh, detached git worktree per run attempt, and its removal.

Worktrees live under the worker's private state (`<state>/worktrees/<run-id>.<attempt>`),
never inside a target checkout, each with a scratch directory beside it
(`<run-id>.<attempt>.scratch`): the approach's private object directory, and the `.git`
file and the git config its sandbox shows (written by sandbox/process.py). The worker's
own git calls in a worktree name its git dir and work tree explicitly
(`Workspace.git_env`), so a `.git`
file the approach rewrote can never point the worker's git at another repository or
config. Worktrees are detached at the baseline (the target repository's HEAD commit, or
in remote mode the commit the attempt's fetch brought), so creating one adds no ref.
Worktree administration (add, remove, prune), landing and a mirror's fetch hold an
exclusive `flock` on the repository's git common directory, so two workers sharing a
repository never race on its metadata; nothing is written into the repository for the
lock.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from rein_aharness.outbox.locking import hold_fd_lock_async
from rein_aharness.outbox.paths import ensure_private_dir
from rein_aharness.repository.git import GitError, git, git_text
from rein_aharness.repository.locate import Repository, RepositoryNotFound

__all__ = [
    "Workspace",
    "discard_workspace",
    "open_workspace",
    "repository_lock",
    "scratch_path",
    "sweep_worktrees",
]

SCRATCH_SUFFIX = ".scratch"


@dataclass(frozen=True)
class Workspace:
    repository: Repository
    path: Path
    baseline: str  # full object id of the commit the worktree started at
    admin_dir: Path  # <common>/worktrees/<name>: the worktree's HEAD, index and logs
    scratch: Path  # <path>.scratch: objects/ and the sandbox's dotgit file

    @property
    def objects_dir(self) -> Path:
        """Where the approach's git writes new objects (an alternate for the worker)."""
        return self.scratch / "objects"

    @property
    def dotgit_file(self) -> Path:
        return self.scratch / "dotgit"

    def git_env(self) -> dict[str, str]:
        """The worker's git in this worktree: explicit git dir, work tree and the
        approach's objects as an alternate (read, never trusted to be complete)."""
        return {
            "GIT_DIR": os.fspath(self.admin_dir),
            "GIT_WORK_TREE": os.fspath(self.path),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.fspath(self.objects_dir),
        }


def scratch_path(path: Path) -> Path:
    return path.with_name(path.name + SCRATCH_SUFFIX)


@asynccontextmanager
async def repository_lock(repository: Repository) -> AsyncIterator[None]:
    """Exclusive flock on the repository's common dir, polled so waiting is cancellable."""
    fd = os.open(repository.common_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    async with hold_fd_lock_async(fd):
        yield


async def open_workspace(
    repository: Repository, worktrees_root: Path, name: str, baseline: str | None = None
) -> Workspace:
    """Create `<worktrees_root>/<name>` detached at `baseline` (a commit the mirror's fetch
    brought, mirror.py), or else at the repository's HEAD commit (single-host mode)."""
    ensure_private_dir(worktrees_root)
    path = worktrees_root / name
    scratch = scratch_path(path)
    for leftover in (path, scratch):
        if leftover.exists() or leftover.is_symlink():
            # A leftover of a run killed mid-execution: never reuse it.
            await anyio.to_thread.run_sync(_remove_tree, leftover)
    async with repository_lock(repository):
        await git(repository.path, "worktree", "prune")
        start = "HEAD" if baseline is None else baseline
        try:
            baseline = await git_text(
                repository.path, "rev-parse", "--verify", f"{start}^{{commit}}"
            )
        except GitError:
            raise RepositoryNotFound(
                f"target_repo {repository.target_repo!r} has no commit at {start}"
            ) from None
        await git(repository.path, "worktree", "add", "--detach", os.fspath(path), baseline)
        admin = Path(await git_text(path, "rev-parse", "--absolute-git-dir"))
    workspace = Workspace(repository, path, baseline, admin_dir=admin, scratch=scratch)
    await anyio.to_thread.run_sync(_make_scratch, workspace)
    return workspace


def _make_scratch(workspace: Workspace) -> None:
    workspace.scratch.mkdir(mode=0o700)
    workspace.objects_dir.mkdir(mode=0o700)
    # The sandbox binds the entry's config.worktree read-only, so it must exist (empty:
    # git reads it only with extensions.worktreeConfig) before the metadata fingerprint;
    # otherwise git inside the sandbox could create it in the writable entry.
    (workspace.admin_dir / "config.worktree").touch(exist_ok=True)


async def discard_workspace(workspace: Workspace) -> None:
    """Remove the worktree and its metadata; commits made in it stay unreferenced.

    Runs shielded, so a cancelled run still cleans up.
    """
    with anyio.CancelScope(shield=True):
        async with repository_lock(workspace.repository):
            with suppress(GitError):
                await git(
                    workspace.repository.path,
                    "worktree",
                    "remove",
                    "--force",
                    "--force",
                    os.fspath(workspace.path),
                )
            await anyio.to_thread.run_sync(_remove_tree, workspace.path)
            await anyio.to_thread.run_sync(_remove_tree, workspace.scratch)
            with suppress(GitError):
                await git(workspace.repository.path, "worktree", "prune")


async def sweep_worktrees(worktrees_root: Path) -> int:
    """Remove worktrees a killed worker left behind; how many were removed.

    An approach runs in its own session, so SIGKILL of the worker does not end it: first
    every process still working inside the worktrees root is killed (found by its
    working directory in /proc, so a recycled pid can never hit an unrelated process).
    Only safe while this process holds the state directory's worker lock (no other
    worker uses this worktrees root).
    """
    if not worktrees_root.is_dir():
        return 0
    await anyio.to_thread.run_sync(kill_processes_inside, worktrees_root)
    removed = 0
    for entry in sorted(worktrees_root.iterdir()):
        common = _common_dir_of(entry)
        await anyio.to_thread.run_sync(_remove_tree, entry)
        removed += 1
        if common is not None and common.is_dir():
            with suppress(GitError):
                await git(common, "--git-dir", os.fspath(common), "worktree", "prune")
    return removed


def kill_processes_inside(root: Path, proc: Path = Path("/proc")) -> int:
    """SIGKILL every process whose working directory lies under `root`; how many."""
    real_root = root.resolve()
    killed = 0
    try:
        entries = list(proc.iterdir())
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd == real_root or cwd.is_relative_to(real_root):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
            except OSError:
                continue
    return killed


def _common_dir_of(worktree: Path) -> Path | None:
    # A worktree's `.git` is a file: "gitdir: <common>/worktrees/<name>".
    try:
        text = (worktree / ".git").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not text.startswith("gitdir: "):
        return None
    admin = Path(text[len("gitdir: ") :].strip())
    return admin.parent.parent if admin.parent.name == "worktrees" else None


def _remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=_make_writable_and_retry)


def _make_writable_and_retry(function: Any, name: str, _exc_info: object) -> None:
    # An approach may leave read-only directories behind; the worktree is ours to remove.
    os.chmod(os.path.dirname(name) or ".", 0o700)
    if os.path.isdir(name) and not os.path.islink(name):
        os.chmod(name, 0o700)
    function(name)
