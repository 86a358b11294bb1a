"""The changes bundle the worker writes (docs/changes.md), checked with real git."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from ops_testsupport.changes_bundles import commit_files, git, make_repository
from rein_aharness.repository.changes_bundle import (
    ChangesTooLarge,
    bundle_name,
    write_changes_bundle,
)

RUN = "0b1e7c55-1d7c-4f0e-9a52-3f3c1d7f6a10"


def _history(repo: Path, object_format: str = "sha1") -> tuple[str, str]:
    baseline = make_repository(repo, object_format=object_format)
    commit_files(repo, {"briefs/a.md": "one\n", "docs/deep/x.txt": "x\n"}, "first")
    head = commit_files(repo, {"briefs/a.md": "two\n", "README.md": None}, "second")
    return baseline, head


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
async def test_the_bundle_verifies_in_a_clone_and_diffs_on_its_own(
    tmp_path: Path, object_format: str
) -> None:
    repo = tmp_path / "repo"
    baseline, head = _history(repo, object_format)
    bundle = await write_changes_bundle(
        repo, tmp_path / "changes", baseline=baseline, head=head, run_id=RUN, attempt=2
    )
    data = bundle.path.read_bytes()
    assert bundle.size == len(data)
    assert bundle.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert bundle.path.name == bundle_name(bundle.digest)
    assert bundle.path.stat().st_mode & 0o777 == 0o600
    version = (
        b"# v3 git bundle\n@object-format=sha256\n"
        if object_format == "sha256"
        else b"# v2 git bundle\n"
    )
    assert data.startswith(version + f"-{baseline}\n{head} refs/heads/rein/{RUN}/2\n\n".encode())

    clone = tmp_path / "clone"
    make_repository(clone, object_format=object_format)
    git(clone, "fetch", "--quiet", str(repo), baseline)
    git(clone, "bundle", "verify", "--quiet", str(bundle.path))
    git(clone, "fetch", "--quiet", str(bundle.path), f"refs/heads/rein/{RUN}/2:refs/heads/got")
    assert git(clone, "rev-parse", "refs/heads/got").decode().strip() == head

    empty = tmp_path / "empty"
    git(tmp_path, "init", "--quiet", "--bare", f"--object-format={object_format}", str(empty))
    pack = data[data.index(b"\n\n") + 2 :]
    git(empty, "index-pack", "--stdin", "--strict", stdin=pack)
    patch = git(empty, "diff-tree", "-p", "-r", baseline, head).decode()
    assert "+two" in patch and "deleted file mode" in patch and "docs/deep/x.txt" in patch
    log = git(empty, "log", "--format=%s", f"{baseline}..{head}").decode().split()
    assert log == ["second", "first"]
    mbox = git(empty, "format-patch", "--stdout", f"{baseline}..{head}").decode()
    assert mbox.count("From ") >= 2


async def test_the_digest_is_the_same_on_a_second_write_and_after_a_repack(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    baseline, head = _history(repo)
    first = await write_changes_bundle(
        repo, tmp_path / "a", baseline=baseline, head=head, run_id=RUN, attempt=1
    )
    again = await write_changes_bundle(
        repo, tmp_path / "b", baseline=baseline, head=head, run_id=RUN, attempt=1
    )
    git(repo, "repack", "-a", "-d", "-q")
    repacked = await write_changes_bundle(
        repo, tmp_path / "c", baseline=baseline, head=head, run_id=RUN, attempt=1
    )
    assert first.digest == again.digest == repacked.digest
    assert first.path.read_bytes() == repacked.path.read_bytes()
    other = await write_changes_bundle(
        repo, tmp_path / "d", baseline=baseline, head=head, run_id=RUN, attempt=2
    )
    assert other.digest != first.digest


async def test_past_the_bound_nothing_is_kept(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    baseline = make_repository(repo)
    noise = subprocess.run(
        ["head", "-c", "200000", "/dev/urandom"], capture_output=True, check=True
    ).stdout
    head = commit_files(repo, {"briefs/blob.bin": noise}, "big")
    changes = tmp_path / "changes"
    with pytest.raises(ChangesTooLarge) as raised:
        await write_changes_bundle(
            repo, changes, baseline=baseline, head=head, run_id=RUN, attempt=1, max_bytes=100_000
        )
    assert str(raised.value).startswith("changes_too_large")
    assert list(changes.iterdir()) == []
