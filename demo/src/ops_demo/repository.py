"""The demo's git repositories, created with one commit: the "forge" the worker fetches
from (a bare repository served over `file://`, as a forge serves one over https), or a
plain checkout.

The identity and configuration are fixed here, so neither the user's git config nor a
missing one changes what is created.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

__all__ = ["GitFailed", "git", "init_bare_repository", "init_repository"]

_IDENTITY = {
    "GIT_AUTHOR_NAME": "ops-demo",
    "GIT_AUTHOR_EMAIL": "ops-demo@example.invalid",
    "GIT_COMMITTER_NAME": "ops-demo",
    "GIT_COMMITTER_EMAIL": "ops-demo@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


class GitFailed(Exception):
    pass


def git(repository: Path, *args: str) -> str:
    """`git args...` in `repository`; its stdout without the trailing newline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_IDENTITY)
    try:
        done = subprocess.run(
            ["git", "-c", "commit.gpgSign=false", "-c", "init.defaultBranch=main", *args],
            cwd=repository,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except FileNotFoundError:
        raise GitFailed("git is not installed (the worker needs it)") from None
    if done.returncode != 0:
        raise GitFailed(f"git {args[0]} failed: {done.stderr.strip()[:300]}")
    return done.stdout.rstrip("\n")


def init_repository(path: Path, files: Mapping[str, str], *, message: str = "initial") -> str:
    """A repository at `path` on branch main with `files` in one commit; its HEAD.

    An existing repository with a commit is left as it is."""
    if (path / ".git").is_dir():
        try:
            return git(path, "rev-parse", "--verify", "HEAD")
        except GitFailed:
            pass
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for relative, content in files.items():
        target = path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    git(path, "add", "--", *files)
    git(path, "commit", "-q", "-m", message)
    return git(path, "rev-parse", "HEAD")


def init_bare_repository(path: Path, files: Mapping[str, str], *, message: str = "initial") -> str:
    """A bare repository at `path` whose default branch main holds `files` in one commit;
    its head. An existing bare repository with a commit is left as it is (the demo's
    state is reused across runs)."""
    if (path / "HEAD").is_file():
        try:
            return git(path, "rev-parse", "--verify", "HEAD^{commit}")
        except GitFailed:
            pass
    if path.exists():
        shutil.rmtree(path)
    staging = path.with_name(f".{path.name}.staging")
    if staging.exists():
        shutil.rmtree(staging)
    try:
        init_repository(staging, files, message=message)
        path.parent.mkdir(parents=True, exist_ok=True)
        git(path.parent, "clone", "--quiet", "--bare", "--no-local", str(staging), str(path))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return git(path, "rev-parse", "--verify", "HEAD^{commit}")
