"""git on untrusted bytes (activity_core.changes.scratch_git): our own repository, our own
environment, bounded in time and output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activity_core.changes.scratch_git import (
    GitFailed,
    GitOutputTooLarge,
    GitTimeout,
    ScratchGit,
)


async def test_a_scratch_repository_is_bare_hookless_and_removed_after(tmp_path: Path) -> None:
    async with ScratchGit() as git:
        root = git.git_dir
        assert (await git.run("rev-parse", "--is-bare-repository")).strip() == b"true"
        assert not (root / "hooks").exists()
        assert (await git.run("config", "--get", "core.hooksPath")).strip() == b"/dev/null"
        # no system or global config reaches it, and its HOME is its own
        listed = (await git.run("config", "--list", "--show-origin")).decode()
        assert "/etc/gitconfig" not in listed
        assert str(Path.home()) + "/.gitconfig" not in listed
    assert not root.exists()


async def test_inherited_git_variables_do_not_reach_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("GIT_DIR", str(elsewhere))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.hookspath'='/tmp/evil'")
    async with ScratchGit() as git:
        assert (await git.run("rev-parse", "--absolute-git-dir")).strip() == str(
            git.git_dir
        ).encode()
        assert (await git.run("config", "--get", "core.hooksPath")).strip() == b"/dev/null"
    assert not elsewhere.exists()
    assert os.environ["GIT_DIR"] == str(elsewhere)


async def test_no_transport_is_allowed() -> None:
    async with ScratchGit() as git:
        with pytest.raises(GitFailed) as caught:
            await git.run("fetch", "https://example.invalid/x.git", timeout_s=10)
        assert "not allowed" in caught.value.stderr or "protocol" in caught.value.stderr


async def test_output_past_the_bound_kills_git() -> None:
    async with ScratchGit() as git:
        with pytest.raises(GitOutputTooLarge):
            await git.run("help", "-a", max_output_bytes=16)


async def test_a_call_past_its_time_bound_is_killed() -> None:
    async with ScratchGit() as git:
        # an alias of our own that runs a child: the kill reaches the whole group
        with pytest.raises(GitTimeout):
            await git.run("-c", "alias.slow=!sleep 30", "slow", timeout_s=0.5)


async def test_a_corrupt_pack_is_a_git_failure() -> None:
    async with ScratchGit() as git:
        with pytest.raises(GitFailed):
            await git.index_pack(b"PACK\x00\x00\x00\x02\x00\x00\x00\x01garbage")
