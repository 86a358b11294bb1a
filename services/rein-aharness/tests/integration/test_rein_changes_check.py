"""The worker's check of a bundle it did not write (repository/changes_check.py), with
real git and the reference builder's genuine and tampered bundles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ops_contracts import parse_repository_grant
from ops_testsupport.changes_bundles import (
    build_changes_bundle,
    bundle_from_other_history,
    bundle_with_merges,
    commit_files,
    git,
    make_repository,
)
from rein_aharness.repository.changes_check import ChangesInvalid, check_changes_bundle

RUN = "0b1e7c55-1d7c-4f0e-9a52-3f3c1d7f6a10"
GRANT: dict[str, Any] = {
    "version": "1",
    "allowed_paths": ["briefs/"],
    "commit_count": {"min": 1, "max": 3},
    "publish": False,
}


async def _check(data: bytes, baseline: str, head: str, commits: list[str]) -> None:
    await check_changes_bundle(
        data,
        run_id=RUN,
        attempt=1,
        baseline=baseline,
        head_after=head,
        commits=commits,
        grant=parse_repository_grant(GRANT),
    )


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
async def test_a_genuine_bundle_passes(tmp_path: Path, object_format: str) -> None:
    repo = tmp_path / "repo"
    baseline = make_repository(repo, object_format=object_format)
    first = commit_files(repo, {"briefs/a.md": "one\n"}, "first")
    head = commit_files(repo, {"briefs/a.md": "two\n"}, "second")
    await _check(build_changes_bundle(repo, baseline, head, RUN, 1), baseline, head, [first, head])


async def test_a_bundle_that_is_not_the_results_is_invalid(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    baseline = make_repository(repo)
    first = commit_files(repo, {"briefs/a.md": "one\n"}, "first")
    head = commit_files(repo, {"briefs/a.md": "two\n"}, "second")
    genuine = build_changes_bundle(repo, baseline, head, RUN, 1)

    async def reason(data: bytes, commits: list[str], base: str = baseline) -> str:
        with pytest.raises(ChangesInvalid) as invalid:
            await _check(data, base, head, commits)
        return invalid.value.reason

    assert "accepted_commits" in await reason(genuine, [head])
    assert "prerequisite" in await reason(genuine, [first, head], base=first)
    other = bundle_from_other_history(repo, first, head, RUN, 1, baseline)
    assert "lacks objects" in await reason(other, [first, head])
    assert "not a git bundle" in await reason(b"", [first, head])
    assert "object id" in await reason(genuine, [head], base="HEAD")


async def test_merges_and_paths_outside_the_grant_are_invalid(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    baseline = make_repository(repo)
    side = commit_files(repo, {"briefs/side.md": "s\n"}, "side")
    git(repo, "reset", "--quiet", "--hard", baseline)
    main = commit_files(repo, {"briefs/main.md": "m\n"}, "main")
    merge = commit_files(repo, {}, "merge", parents=(main, side))
    with pytest.raises(ChangesInvalid, match="merge"):
        await _check(
            bundle_with_merges(repo, baseline, merge, RUN, 1), baseline, merge, [main, merge]
        )

    outside = commit_files(repo, {"docs/secret.md": "x\n"}, "outside", parents=(baseline,))
    with pytest.raises(ChangesInvalid, match="outside the grant"):
        await _check(
            build_changes_bundle(repo, baseline, outside, RUN, 1), baseline, outside, [outside]
        )
