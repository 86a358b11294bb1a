"""The reference builder of changes bundles (ops_testsupport.changes_bundles) makes what
docs/changes.md describes: a bundle any clone with the baseline takes, whose pack alone is
enough to diff and to format patches."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from activity_core.changes.bundle_format import parse_bundle_header
from ops_testsupport.changes_bundles import (
    build_changes_bundle,
    changes_ref_name,
    commit_files,
    git,
    make_repository,
)

RUN_ID = "0b9e7a52-64a1-4bd6-9f39-0d3c3b1e2f10"


@dataclass(frozen=True)
class Built:
    """A repository of `object_format` with two commits on its baseline, and their bundle."""

    repo: Path
    object_format: str
    baseline: str
    tip: str
    bundle: bytes


@pytest.fixture(params=["sha1", "sha256"])
def built(request: pytest.FixtureRequest, tmp_path: Path) -> Built:
    repo, object_format = tmp_path / "work", request.param
    baseline = make_repository(repo, object_format=object_format)
    commit_files(repo, {"docs/a.md": "one\n", "docs/deep/b.md": "two\n"}, "add docs")
    tip = commit_files(repo, {"docs/a.md": "one, changed\n", "README.md": None}, "edit")
    bundle = build_changes_bundle(repo, baseline, tip, RUN_ID, 1)
    return Built(repo, object_format, baseline, tip, bundle)


def _clone_at(source: Path, baseline: str, target: Path) -> None:
    git(source, "branch", "-f", "base", baseline)
    subprocess.run(
        [
            "git",
            "clone",
            "--quiet",
            "--single-branch",
            "--branch",
            "base",
            str(source),
            str(target),
        ],
        check=True,
        capture_output=True,
    )


def test_a_clone_with_the_baseline_verifies_and_fetches_the_bundle(
    tmp_path: Path, built: Built
) -> None:
    repo, baseline, tip, bundle = built.repo, built.baseline, built.tip, built.bundle
    header = parse_bundle_header(bundle)
    assert header.baseline == baseline
    assert header.refs == ((tip, changes_ref_name(RUN_ID, 1)),)
    assert header.object_format == built.object_format
    path = tmp_path / "changes.bundle"
    path.write_bytes(bundle)
    clone = tmp_path / "clone"
    _clone_at(repo, baseline, clone)
    git(clone, "bundle", "verify", str(path))
    git(clone, "fetch", "--quiet", str(path), f"{changes_ref_name(RUN_ID, 1)}:refs/heads/got")
    assert git(clone, "rev-parse", "refs/heads/got").decode().strip() == tip


def test_an_empty_repository_diffs_and_formats_patches_from_the_pack_alone(
    tmp_path: Path, built: Built
) -> None:
    repo, baseline, tip = built.repo, built.baseline, built.tip
    pack = built.bundle[parse_bundle_header(built.bundle).pack_offset :]
    empty = tmp_path / "empty.git"
    git(
        tmp_path,
        "init",
        "--quiet",
        "--bare",
        "--template=",
        f"--object-format={built.object_format}",
        str(empty),
    )
    git(empty, "index-pack", "--stdin", "--fsck-objects", stdin=pack)
    diff = git(empty, "diff-tree", "-r", "-p", "--no-renames", baseline, tip).decode()
    assert "+one, changed" in diff
    assert "+two" in diff
    assert "-hello" in diff
    mbox = git(empty, "format-patch", "--stdout", f"{baseline}..{tip}")
    assert mbox.count(b"\nSubject: [PATCH") == 2
    # the patches apply on the baseline
    clone = tmp_path / "clone"
    _clone_at(repo, baseline, clone)
    git(clone, "am", "--quiet", stdin=mbox)
    assert git(clone, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", f"{tip}^{{tree}}")
