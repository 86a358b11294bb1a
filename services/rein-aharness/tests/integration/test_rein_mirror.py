"""Remote mode's mirrors (repository/mirror.py) against `file://` remotes: real git, real
processes. The smart-HTTP cases (credentials, drops, stalls) are in test_rein_remote.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from rein_aharness.repository import (
    FetchFailed,
    RemoteSource,
    ensure_mirror,
    fetch_baseline,
    land,
    worktree_session,
)
from rein_aharness.repository.mirror import FETCH_NAMESPACE
from rein_worker_kit import git

OWNER_NAME = "acme/app"


class Upstream:
    """Bare repositories in `root/<owner>/<name>.git`, pushed to from a scratch clone."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.template = f"file://{root}/{{target_repo}}.git"

    def create(self, target_repo: str = OWNER_NAME) -> str:
        bare = self.root / f"{target_repo}.git"
        bare.mkdir(parents=True)
        git(bare, "init", "-q", "--bare", "-b", "main")
        work = self.root / "work" / target_repo
        work.mkdir(parents=True)
        git(work, "init", "-q", "-b", "main")
        git(work, "remote", "add", "origin", str(bare))
        return self.commit(target_repo, {"README.md": "# app\n", "briefs/.keep": ""})

    def commit(self, target_repo: str, files: dict[str, str], *, force: bool = False) -> str:
        work = self.root / "work" / target_repo
        if force:
            git(work, "checkout", "-q", "--orphan", "rewritten")
            git(work, "rm", "-rq", "--cached", ".")
        for name, text in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(text)
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", "upstream change")
        git(work, "push", "-q", "--force", "origin", "HEAD:main")
        return git(work, "rev-parse", "HEAD")

    def commit_blob(self, target_repo: str, megabytes: int) -> str:
        work = self.root / "work" / target_repo
        (work / "large.bin").write_bytes(os.urandom(megabytes << 20))
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", "large")
        git(work, "push", "-q", "origin", "HEAD:main")
        return git(work, "rev-parse", "HEAD")


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def mirrors(tmp_path: Path) -> Path:
    root = tmp_path / "mirrors"
    root.mkdir()
    return root


def _refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ") for line in out.splitlines())


async def test_each_fetch_moves_the_baseline_and_leaves_landed_branches(
    upstream: Upstream, mirrors: Path
) -> None:
    first = upstream.create()
    source = RemoteSource(upstream.template)
    mirror = await ensure_mirror(mirrors, OWNER_NAME)
    assert mirror.path == mirrors / "acme" / "app.git"
    assert git(mirror.path, "rev-parse", "--is-bare-repository") == "true"
    assert await fetch_baseline(mirror, source) == first
    await land(mirror, first, "run-1", 1)

    second = upstream.commit(OWNER_NAME, {"briefs/a.md": "a\n"})
    assert await fetch_baseline(mirror, source) == second
    assert _refs(mirror.path)[f"{FETCH_NAMESPACE}main"] == second

    rewritten = upstream.commit(OWNER_NAME, {"other.md": "x\n"}, force=True)
    assert await fetch_baseline(mirror, source) == rewritten
    refs = _refs(mirror.path)
    # The landing branch is exactly where it was; no tag, no local branch was added.
    assert refs == {f"{FETCH_NAMESPACE}main": rewritten, "refs/heads/rein/run-1/1": first}
    # Nothing in the mirror names the remote: fetched by URL, no FETCH_HEAD.
    assert "remote" not in (mirror.path / "config").read_text()
    assert not (mirror.path / "FETCH_HEAD").exists()
    git(mirror.path, "fsck", "--strict", "--no-dangling")


async def test_the_session_starts_at_the_fetched_commit_not_the_mirror_head(
    upstream: Upstream, mirrors: Path, tmp_path: Path
) -> None:
    upstream.create()
    head = upstream.commit(OWNER_NAME, {"briefs/b.md": "b\n"})
    source = RemoteSource(upstream.template)
    session = worktree_session(mirrors, tmp_path / "worktrees", OWNER_NAME, "r.1", source)
    async with session as opened:
        assert opened.workspace.baseline == head
        assert git(opened.workspace.path, "rev-parse", "HEAD") == head
        assert (opened.workspace.path / "briefs" / "b.md").read_text() == "b\n"
        # Another worker's fetch moving the fetched ref is not the approach's change.
        assert not any(name.startswith(FETCH_NAMESPACE) for name in opened.refs_before)
    assert list((tmp_path / "worktrees").iterdir()) == []


async def test_a_missing_remote_repository_fails_before_any_worktree(
    upstream: Upstream, mirrors: Path, tmp_path: Path
) -> None:
    source = RemoteSource(upstream.template)
    with pytest.raises(FetchFailed) as failed:
        async with worktree_session(mirrors, tmp_path / "wt", "acme/nothing", "r.1", source):
            pytest.fail("a session opened without a remote repository")
    assert failed.value.kind == "not_found"
    assert failed.value.reason.startswith("repository_not_found: ")
    assert not (tmp_path / "wt").exists()


async def test_an_empty_remote_repository_is_not_found(upstream: Upstream, mirrors: Path) -> None:
    (upstream.root / "acme" / "empty.git").mkdir(parents=True)
    git(upstream.root / "acme" / "empty.git", "init", "-q", "--bare")
    mirror = await ensure_mirror(mirrors, "acme/empty")
    with pytest.raises(FetchFailed) as failed:
        await fetch_baseline(mirror, RemoteSource(upstream.template))
    assert failed.value.kind == "not_found" and "no default branch" in failed.value.reason


async def test_only_the_fetch_may_use_the_network(upstream: Upstream, mirrors: Path) -> None:
    """The worker's other git calls keep protocol.allow=never, file:// included."""
    upstream.create()
    mirror = await ensure_mirror(mirrors, OWNER_NAME)
    await fetch_baseline(mirror, RemoteSource(upstream.template))
    from rein_aharness.repository import GitError
    from rein_aharness.repository.git import git as worker_git

    with pytest.raises(GitError, match="not allowed"):
        await worker_git(mirror.path, "fetch", f"file://{upstream.root}/{OWNER_NAME}.git")


async def test_a_fetch_past_the_size_bound_is_stopped_and_undone(
    upstream: Upstream, mirrors: Path
) -> None:
    first = upstream.create()
    mirror = await ensure_mirror(mirrors, OWNER_NAME)
    small = RemoteSource(upstream.template, max_bytes=1 << 20)
    assert await fetch_baseline(mirror, small) == first
    packs_before = sorted(os.listdir(mirror.common_dir / "objects" / "pack"))
    large = upstream.commit_blob(OWNER_NAME, 8)

    with pytest.raises(FetchFailed) as failed:
        await fetch_baseline(mirror, small)
    assert failed.value.kind == "too_large"
    assert "REIN_AHARNESS_FETCH_MAX_MB (1 MB)" in failed.value.reason
    # Nothing of it stayed: the ref where it was, no pack, no tmp_* leftover.
    assert _refs(mirror.path)[f"{FETCH_NAMESPACE}main"] == first
    assert sorted(os.listdir(mirror.common_dir / "objects" / "pack")) == packs_before
    # And the mirror is still usable: a larger bound fetches the same commit.
    assert await fetch_baseline(mirror, RemoteSource(upstream.template)) == large
    git(mirror.path, "fsck", "--strict", "--no-dangling")


async def test_concurrent_creators_share_one_mirror(upstream: Upstream, mirrors: Path) -> None:
    upstream.create()
    made = []

    async def create() -> None:
        made.append(await ensure_mirror(mirrors, OWNER_NAME))

    async with anyio.create_task_group() as tasks:
        for _ in range(6):
            tasks.start_soon(create)
    assert {repository.path for repository in made} == {mirrors / "acme" / "app.git"}
    assert sorted(os.listdir(mirrors / "acme")) == ["app.git"]  # no staging left


_FETCHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import anyio
    from rein_aharness.repository import RemoteSource, ensure_mirror, fetch_baseline

    async def main() -> None:
        root, template, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
        for _ in range(rounds):
            mirror = await ensure_mirror(root, "acme/app")
            print(await fetch_baseline(mirror, RemoteSource(template)), flush=True)

    anyio.run(main)
    """
)


def test_two_processes_fetching_one_mirror_do_not_corrupt_it(
    upstream: Upstream, mirrors: Path
) -> None:
    head = upstream.create()
    for index in range(20):
        head = upstream.commit(OWNER_NAME, {f"briefs/{index}.md": f"{index}\n"})
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _FETCHER, str(mirrors), upstream.template, "4"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert out.split() == [head] * 4
    mirror = mirrors / "acme" / "app.git"
    git(mirror, "fsck", "--strict", "--no-dangling")
    assert _refs(mirror) == {f"{FETCH_NAMESPACE}main": head}
    assert not [n for n in os.listdir(mirror / "objects" / "pack") if n.startswith("tmp_")]


_LOCK_HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(60)
    """
)


async def test_a_fetch_waits_for_another_process_holding_the_mirror(
    upstream: Upstream, mirrors: Path
) -> None:
    """One fetch per mirror at a time across processes: the flock on the mirror (what a
    second worker, or an operator command, holds while it fetches or lands)."""
    head = upstream.create()
    mirror = await ensure_mirror(mirrors, OWNER_NAME)
    holder = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(mirror.common_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with anyio.move_on_after(1.5) as waited:
            await fetch_baseline(mirror, RemoteSource(upstream.template))
        assert waited.cancelled_caught, "the fetch ran while another process held the mirror"
        assert f"{FETCH_NAMESPACE}main" not in _refs(mirror.path)
    finally:
        holder.kill()
        holder.communicate()
    assert await fetch_baseline(mirror, RemoteSource(upstream.template)) == head


async def test_old_history_with_format_slips_is_fetched(upstream: Upstream, mirrors: Path) -> None:
    """transfer.fsckObjects is on, but a commit with a malformed time zone (as old
    converted histories have) must not make the repository unfetchable."""
    upstream.create()
    bare = upstream.root / f"{OWNER_NAME}.git"
    tree = git(bare, "rev-parse", "main^{tree}")
    parent = git(bare, "rev-parse", "main")
    body = (
        f"tree {tree}\nparent {parent}\n"
        "author Old <old@example.invalid> 1000000000 +123\n"
        "committer Old <old@example.invalid> 1000000000 +123\n\nconverted\n"
    )
    odd = git(bare, "hash-object", "-t", "commit", "--literally", "-w", "--stdin", stdin=body)
    git(bare, "update-ref", "refs/heads/main", odd)
    mirror = await ensure_mirror(mirrors, OWNER_NAME)
    assert await fetch_baseline(mirror, RemoteSource(upstream.template)) == odd
