"""What the sandbox shows of the repository's git dir: no credential, and git still works.

Real bwrap, a real repository whose config and git dir hold a token in every place a
token is found in practice, and a sandboxed approach that searches all it can read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rein_aharness.gateway.approaches.command import run_in_sandbox
from rein_aharness.profiles import BUILTIN_SANDBOXES, SandboxChoice
from rein_aharness.repository import WorktreeSession, git_environment, worktree_session
from rein_aharness.sandbox import resolve_bwrap, sandbox_over
from rein_aharness.sandbox.gitview import config_text
from rein_aharness.sandbox.process import Sandbox
from rein_worker_kit import Repos, git

BWRAP = resolve_bwrap(None)
BWRAP_LOCAL = SandboxChoice("profile.bwrap-local", BUILTIN_SANDBOXES["profile.bwrap-local"])
# The searches read it from a pattern file made of two halves, so no command line
# inside the sandbox ever holds it whole.
TOKEN = "tok-5e884898da28047151d0e56f8dc6"
_HALF = len(TOKEN) // 2
_FIND = f"printf '%s%s\\n' {TOKEN[:_HALF]} {TOKEN[_HALF:]} > /tmp/pattern; "
_IDENTITY = {
    "GIT_AUTHOR_NAME": "rein",
    "GIT_AUTHOR_EMAIL": "rein@rein.invalid",
    "GIT_COMMITTER_NAME": "rein",
    "GIT_COMMITTER_EMAIL": "rein@rein.invalid",
}


def _plant_credentials(repo: Path) -> None:
    git(repo, "config", "remote.origin.url", f"https://user:{TOKEN}@git.invalid/x.git")
    git(repo, "config", "http.extraHeader", f"Authorization: Bearer {TOKEN}")
    git(repo, "config", "credential.helper", f"store --file=/secrets/{TOKEN}")
    git(repo, "config", f"url.https://{TOKEN}@git.invalid/.insteadOf", "https://git.invalid/")
    included = repo.parent / "included.config"
    included.write_text(f"[http]\n\textraHeader = X-Token: {TOKEN}\n")
    git(repo, "config", "include.path", str(included))
    dotgit = repo / ".git"
    (dotgit / "FETCH_HEAD").write_text(f"abc\t\tbranch 'main' of https://{TOKEN}@git.invalid\n")
    (dotgit / ".git-credentials").write_text(f"https://user:{TOKEN}@git.invalid\n")
    (dotgit / "config.worktree").write_text(f"[http]\n\textraHeader = {TOKEN}\n")
    (dotgit / "remotes").mkdir()
    (dotgit / "remotes" / "origin").write_text(f"URL: https://{TOKEN}@git.invalid/x.git\n")
    (dotgit / "modules" / "sub").mkdir(parents=True)
    (dotgit / "modules" / "sub" / "config").write_text(f"[remote]\n\turl = {TOKEN}\n")
    (dotgit / "hooks" / "pre-push").write_text(f"#!/bin/sh\ncurl -H {TOKEN}\n")
    (dotgit / "logs" / "HEAD").write_text(f"0 1 a <a> 0 +0000\tclone: from {TOKEN}\n")


@pytest.fixture
async def session(repos: Repos, tmp_path: Path) -> AsyncIterator[WorktreeSession]:
    repo = repos.make()
    _plant_credentials(repo)
    async with worktree_session(
        repos.root, tmp_path / "worktrees", "research/briefs", "run.1"
    ) as opened:
        yield opened


async def _sh(sandbox: Sandbox, script: str) -> tuple[int | None, str]:
    env = git_environment(base={"PATH": "/usr/bin:/bin"}, extra={**_IDENTITY, **sandbox.git_env()})
    outcome = await run_in_sandbox(["sh", "-c", script], 60, sandbox, env)
    return outcome.returncode, outcome.output_tail.decode("utf-8", "replace")


async def test_no_credential_of_the_repository_is_readable_in_the_sandbox(
    session: WorktreeSession,
) -> None:
    sandbox = await sandbox_over(session.workspace, BWRAP_LOCAL, BWRAP)
    # Everything it can read but the host's runtime (/usr, /bin, /lib*: system files,
    # never repository data, and gigabytes to read): every file under /, its own and
    # every visible process's environment and command line, the mount table, and what
    # git itself reports of its config.
    code, out = await _sh(
        sandbox,
        _FIND + "for d in /* /.[!.]*; do case $d in /usr|/bin|/sbin|/lib*|/proc) ;; "
        '*) grep -rsl -D skip -f /tmp/pattern "$d" | grep -vx /tmp/pattern | sed "s/^/FOUND /";; '
        "esac; done; "
        "grep -sl -f /tmp/pattern /proc/*/environ /proc/*/cmdline /proc/self/mountinfo "
        '| sed "s/^/FOUND /"; '
        'git config --list --show-origin | grep -f /tmp/pattern | sed "s/^/FOUND /"; '
        "ls -a /repository.git; echo searched",
    )
    assert code == 0 and out.rstrip().endswith("searched"), out
    assert "FOUND" not in out, out
    shown = set(out.split())
    assert {"objects", "refs", "HEAD", "config", "worktrees"} <= shown
    hidden = {"FETCH_HEAD", ".git-credentials", "config.worktree", "remotes", "modules", "hooks"}
    assert not shown & (hidden | {"logs"}), out


async def test_git_works_in_the_sandbox_with_the_generated_config(
    session: WorktreeSession,
) -> None:
    workspace = session.workspace
    sandbox = await sandbox_over(workspace, BWRAP_LOCAL, BWRAP)
    code, out = await _sh(
        sandbox,
        "git status --porcelain && echo more > briefs/new.md && git add briefs/new.md && "
        "git commit -qm 'in the sandbox' && git rev-parse HEAD && "
        "git config --get core.repositoryformatversion && "
        "(git config --get remote.origin.url || echo no-remote)",
    )
    assert code == 0, out
    head, version, remote = out.split()
    assert (version, remote) == ("0", "no-remote")
    # the commit's objects are in the run's private object directory, not the repository
    env = workspace.git_env()
    assert git(workspace.path, "--git-dir", env["GIT_DIR"], "rev-parse", "HEAD") == head
    assert (workspace.objects_dir / head[:2] / head[2:]).is_file()
    repo_objects = workspace.repository.common_dir / "objects"
    assert not (repo_objects / head[:2] / head[2:]).exists()


async def test_the_worktree_config_is_read_only_in_the_sandbox(
    session: WorktreeSession,
) -> None:
    workspace = session.workspace
    admin_config = workspace.admin_dir / "config.worktree"
    assert admin_config.read_bytes() == b""  # created empty, before the fingerprint
    assert session.metadata_before["$GIT_DIR/worktrees/<run>/config.worktree"].startswith("file:")
    sandbox = await sandbox_over(workspace, BWRAP_LOCAL, BWRAP)
    code, out = await _sh(
        sandbox,
        "admin=$(git rev-parse --git-dir); "
        "(printf '[core]\\n\\thooksPath = /workspace\\n' > $admin/config.worktree) 2>&1; "
        "(rm -f $admin/config.worktree) 2>&1; "
        "(git config --file $admin/config.worktree core.hooksPath /workspace) 2>&1; "
        "(echo x > /repository.git/config) 2>&1; (echo x > /repository.git/worktrees/other) 2>&1; "
        "echo tried",
    )
    assert code == 0 and out.rstrip().endswith("tried"), out
    assert out.count("Read-only file system") >= 3, out
    assert admin_config.read_bytes() == b""
    assert not (workspace.admin_dir.parent / "other").exists()


def test_the_generated_config_keeps_only_the_allowlisted_keys() -> None:
    text = config_text(
        [
            ("core.repositoryformatversion", "1"),
            ("core.bare", "false"),
            ("core.worktree", "../.."),
            ("core.sshCommand", "ssh -i /keys/deploy"),
            ("core.hooksPath", "/hooks"),
            ("remote.origin.url", f"https://user:{TOKEN}@git.invalid/x.git"),
            ("http.extraheader", f"Authorization: Bearer {TOKEN}"),
            ("credential.helper", "store"),
            ("include.path", "/etc/creds"),
            ("includeIf.gitdir:/x/.path", "/etc/creds"),
            ("extensions.objectFormat", "sha256"),
            ("extensions.worktreeConfig", "true"),
            ("core.autocrlf", 'in"put\\'),
        ]
    )
    assert text == (
        "[core]\n"
        '\trepositoryformatversion = "1"\n'
        '\tbare = "false"\n'
        '\tautocrlf = "in\\"put\\\\"\n'
        "[extensions]\n"
        '\tobjectformat = "sha256"\n'
        '\tworktreeconfig = "true"\n'
    )


@pytest.mark.parametrize(
    "init",
    [["init", "-q", "-b", "main", "--object-format=sha256"], ["init", "-q", "-b", "main"]],
    ids=["sha256", "worktree-config"],
)
async def test_the_generated_config_keeps_what_the_repository_format_needs(
    tmp_path: Path, init: list[str]
) -> None:
    root = tmp_path / "repositories"
    repo = root / "research" / "briefs"
    repo.mkdir(parents=True)
    git(repo, *init)
    if "--object-format=sha256" not in init:
        git(repo, "config", "core.repositoryformatversion", "1")
        git(repo, "config", "extensions.worktreeConfig", "true")
        git(repo, "config", "--worktree", "core.sparseCheckout", "false")
    (repo / "README.md").write_text("# briefs\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    _plant_credentials(repo)
    async with worktree_session(root, tmp_path / "wt", "research/briefs", "run.1") as opened:
        sandbox = await sandbox_over(opened.workspace, BWRAP_LOCAL, BWRAP)
        code, out = await _sh(
            sandbox,
            "echo x > new.md && git add new.md && git commit -qm sandboxed && "
            "git rev-parse HEAD && git config --show-scope --get-regexp '^extensions'",
        )
    assert code == 0, out
    head, *extensions = out.splitlines()
    if "--object-format=sha256" in init:
        assert len(head) == 64 and extensions == ["local\textensions.objectformat sha256"]
    else:
        assert len(head) == 40 and extensions == ["local\textensions.worktreeconfig true"]
