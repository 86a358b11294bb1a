"""Real git repositories for the runs' target_repo, and what the worker left in them."""

from __future__ import annotations

from pathlib import Path

from ops_demo.repository import git, init_repository

__all__ = ["commits_on", "landing_branches", "make_repository", "show"]


def make_repository(root: Path, target_repo: str) -> tuple[Path, str]:
    """`<root>/<target_repo>` with one commit; (its path, its HEAD)."""
    path = root / target_repo
    head = init_repository(path, {"README.md": f"# {target_repo}\n"}, message="baseline")
    return path, head


def landing_branches(repository: Path) -> dict[str, str]:
    """`rein/<run>/<attempt>` branch name -> commit (where the worker lands accepted work)."""
    out = git(
        repository, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/rein"
    )
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def commits_on(repository: Path, ref: str, base: str) -> list[str]:
    out = git(repository, "rev-list", f"{base}..{ref}")
    return out.split()


def show(repository: Path, ref: str, path: str) -> str:
    return git(repository, "show", f"{ref}:{path}")
