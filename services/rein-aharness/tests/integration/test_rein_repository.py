"""Repository work inside the grant: locating targets, judging work, landing (real git)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ops_contracts import parse_repository_grant
from rein_aharness.repository import (
    LandingError,
    RepositoryNotFound,
    WorkInspection,
    judge,
    land,
    resolve_repository,
    worktree_session,
)
from rein_aharness.repository.worktree import kill_processes_inside
from rein_worker_kit import GRANT, Repos, git

SHA = "a" * 40


def _inspection(**fields: object) -> WorkInspection:
    base: dict[str, object] = {
        "baseline": SHA,
        "head_after": "b" * 40,
        "descends": True,
        "commit_count": 1,
        "commits": ("b" * 40,),
        "merges": False,
        "paths": ("briefs/x.md",),
        "ref_changes": (),
        "refs_after": {},
    }
    base.update(fields)
    return WorkInspection(**base)  # type: ignore[arg-type]


GRANT_V1 = parse_repository_grant({**GRANT, "allowed_paths": ["briefs/", "README.md"]})


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, None),
        ({"paths": ("README.md", "briefs/a/b.md")}, None),
        ({"ref_changes": ("refs/tags/v1",)}, "changed refs"),
        ({"head_after": None}, "not a commit"),
        ({"descends": False}, "does not descend"),
        ({"merges": True}, "merge commit"),
        ({"commit_count": 0, "commits": ()}, "0 commits is outside"),
        ({"commit_count": 2}, "2 commits is outside"),
        ({"paths": ("docs/x.md",)}, "outside the grant's allowed_paths: 'docs/x.md'"),
        ({"paths": ("briefs/.GIT/config",)}, ".git segment"),
        ({"paths": ("briefs/../x",)}, "'..' segment"),
        ({"paths": tuple(f"briefs/{i}.md" for i in range(101))}, "more than the evidence"),
    ],
)
def test_judge(fields: dict[str, object], reason: str | None) -> None:
    verdict = judge(_inspection(**fields), GRANT_V1)
    assert verdict.accepted is (reason is None)
    if reason is not None:
        assert verdict.reason is not None and reason in verdict.reason


def test_without_a_grant_only_read_only_work_is_accepted() -> None:
    assert judge(_inspection(commit_count=0, commits=(), paths=()), None).accepted
    verdict = judge(_inspection(), None)
    assert not verdict.accepted and "may not commit" in (verdict.reason or "")


async def test_targets_resolve_under_the_root_only(repos: Repos, tmp_path: Path) -> None:
    repo = repos.make("research/briefs")
    found = await resolve_repository(repos.root, "research/briefs")
    assert found.path == repo and found.common_dir == repo / ".git"

    bare = repos.root / "research" / "archive.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    assert (await resolve_repository(repos.root, "research/archive")).path == bare

    outside = tmp_path / "outside"
    outside.mkdir()
    git(outside, "init", "-q")
    (repos.root / "research" / "escape").symlink_to(outside)
    (repos.root / "research" / "plain").mkdir()
    for target, problem in [
        ("research/escape", "outside the repositories root"),
        ("../outside", "not an owner/name path"),
        ("/etc", "not an owner/name path"),
        ("research/missing", "not under the repositories root"),
        ("research/briefs/briefs", "not a git repository"),
    ]:
        with pytest.raises(RepositoryNotFound, match=problem):
            await resolve_repository(repos.root, target)
    # a plain directory inside a repository that encloses the root is not a target
    git(repos.root, "init", "-q")
    with pytest.raises(RepositoryNotFound, match="not a git repository"):
        await resolve_repository(repos.root, "research/plain")


async def test_landing_is_create_only_and_idempotent(repos: Repos) -> None:
    repo = repos.make()
    found = await resolve_repository(repos.root, "research/briefs")
    head = git(repo, "rev-parse", "HEAD")
    ref = await land(found, head, "run-1", 1)
    assert ref == "refs/heads/rein/run-1/1"
    assert await land(found, head, "run-1", 1) == ref
    git(repo, "commit", "-q", "--allow-empty", "-m", "other")
    with pytest.raises(LandingError, match="already exists at another commit"):
        await land(found, git(repo, "rev-parse", "HEAD"), "run-1", 1)
    assert git(repo, "rev-parse", ref) == head


async def test_a_session_puts_refs_back_and_removes_its_worktree(
    repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    refs_before = Repos.refs(repo)
    worktrees = tmp_path / "worktrees"
    async with worktree_session(repos.root, worktrees, "research/briefs", "run.1") as session:
        assert session.workspace.path == worktrees / "run.1"
        assert session.workspace.baseline == git(repo, "rev-parse", "HEAD")
        git(session.workspace.path, "branch", "sneaky")
        git(session.workspace.path, "tag", "v-sneaky")
        (session.workspace.path / "briefs" / "ro").mkdir()
        (session.workspace.path / "briefs" / "ro" / "f").write_text("x")
        os.chmod(session.workspace.path / "briefs" / "ro", 0o500)
    assert Repos.refs(repo) == refs_before
    assert list(worktrees.iterdir()) == []
    assert len(Repos.worktrees(repo)) == 1


async def test_an_empty_repository_is_refused_before_a_worktree_exists(
    repos: Repos, tmp_path: Path
) -> None:
    empty = repos.root / "research" / "empty"
    empty.mkdir(parents=True)
    git(empty, "init", "-q")
    with pytest.raises(RepositoryNotFound, match="no commit at HEAD"):
        async with worktree_session(repos.root, tmp_path / "wt", "research/empty", "run.1"):
            pass
    assert not (tmp_path / "wt" / "run.1").exists()


def test_only_processes_working_inside_the_root_are_killed(tmp_path: Path) -> None:
    assert kill_processes_inside(tmp_path / "nobody-works-here") == 0
