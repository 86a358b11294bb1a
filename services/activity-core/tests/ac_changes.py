"""Real changes for granted runs in the tests: a repository, commits, the bundle the worker
would upload (ops_testsupport.changes_bundles), and the close's evidence that names it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops_contracts import acceptance_policy_id, grant_id, parse_repository_grant
from ops_testsupport.changes_bundles import (
    build_changes_bundle,
    bundle_digest,
    commit_files,
    make_repository,
)


@dataclass(frozen=True)
class Changes:
    repo: Path
    baseline: str
    commits: tuple[str, ...]
    paths: tuple[str, ...]
    bundle: bytes

    @property
    def head_after(self) -> str:
        return self.commits[-1]

    @property
    def digest(self) -> str:
        return bundle_digest(self.bundle)


def make_changes(
    where: Path,
    run_id: uuid.UUID | str,
    attempt: int = 1,
    *,
    commits: list[dict[str, str | bytes | None]] | None = None,
) -> Changes:
    """A repository under `where` with a baseline and `commits` (one dict of files each;
    by default one commit adding briefs/2026-12-03.md), and the attempt's bundle."""
    repo = where / f"repo-{run_id}-{attempt}"
    baseline = make_repository(repo)
    made: list[str] = []
    paths: set[str] = set()
    default: list[dict[str, str | bytes | None]] = [{"briefs/2026-12-03.md": "# brief\n"}]
    for n, files in enumerate(commits or default):
        made.append(commit_files(repo, files, f"change {n + 1}"))
        paths.update(files)
    bundle = build_changes_bundle(repo, baseline, made[-1], str(run_id), attempt)
    return Changes(repo, baseline, tuple(made), tuple(sorted(paths)), bundle)


def completion(grant: dict[str, Any], changes: Changes, **overrides: Any) -> dict[str, Any]:
    """A granted complete's result naming exactly `changes` (override any transaction
    field; None drops it)."""
    parsed = parse_repository_grant(grant)
    transaction: dict[str, Any] = {
        "transaction_id": "tx-1",
        "baseline_digest": changes.baseline,
        "changes_digest": changes.digest,
        "grant_id": grant_id(parsed),
        "acceptance_policy_id": acceptance_policy_id(parsed),
        "acceptance": "accepted",
        "accepted_commits": list(changes.commits),
        "accepted_paths": list(changes.paths),
    }
    head_after = overrides.pop("head_after", changes.head_after)
    transaction.update(overrides)
    result: dict[str, Any] = {
        "ok": True,
        "repository_transaction": {k: v for k, v in transaction.items() if v is not None},
    }
    if head_after is not None:
        result["head_after"] = head_after
    return result
