"""What an approach sees of the machine: the mounts of its sandbox and its git variables.

Inside a bwrap sandbox the run's worktree is always `/workspace` and the repository's git
directory `/repository.git`, whatever their host paths; the worktree's own `.git` file is
covered by one that points there. Git writes new objects only to the run's private object
directory (`/objects`); the repository's objects are an alternate it can read and never
write, so the approach can add objects but not remove or rewrite any. The worker imports
the objects of accepted work itself (repository/landing.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rein_aharness.sandbox.secrets import LoadedSecret

__all__ = [
    "OBJECTS",
    "REPOSITORY",
    "WORKSPACE",
    "GitMounts",
    "SandboxMounts",
    "approach_git_environment",
    "dotgit_text",
]

WORKSPACE = PurePosixPath("/workspace")
REPOSITORY = PurePosixPath("/repository.git")
OBJECTS = PurePosixPath("/objects")


@dataclass(frozen=True)
class GitMounts:
    common_dir: Path  # the repository's git dir: some entries read-only at /repository.git
    admin_dir: Path  # <common>/worktrees/<name>: read-write (the run's HEAD, index, logs)
    objects_dir: Path  # the run's private object directory: read-write at /objects
    dotgit_file: Path  # "gitdir: /repository.git/worktrees/<name>", over /workspace/.git
    config_file: Path  # the config the sandbox shows at /repository.git/config (gitview.py)

    @property
    def admin_name(self) -> str:
        return self.admin_dir.name


@dataclass(frozen=True)
class SandboxMounts:
    worktree: Path  # read-write at /workspace
    git: GitMounts | None = None  # None: no repository (the start-up probe)
    report_dir: Path | None = None  # read-write at /rein/report (result_file.py)
    secrets: tuple[LoadedSecret, ...] = ()  # files on a tmpfs at /rein/secrets (secrets.py)


def dotgit_text(admin_name: str) -> str:
    """The `.git` file the approach sees: its worktree metadata at the sandbox path."""
    return f"gitdir: {REPOSITORY}/worktrees/{admin_name}\n"


def approach_git_environment(mounts: SandboxMounts, *, confined: bool) -> dict[str, str]:
    """Where git inside the approach writes objects, and where it reads the old ones.

    `confined`: the sandbox paths; otherwise (kind none) the host paths, so an unconfined
    approach still writes its objects to the private directory (by convention only).
    """
    if mounts.git is None:
        return {}
    if confined:
        objects, alternate = str(OBJECTS), f"{REPOSITORY}/objects"
    else:
        objects = os.fspath(mounts.git.objects_dir)
        alternate = os.fspath(mounts.git.common_dir / "objects")
    return {"GIT_OBJECT_DIRECTORY": objects, "GIT_ALTERNATE_OBJECT_DIRECTORIES": alternate}
