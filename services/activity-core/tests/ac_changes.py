"""Real changes in the tests, made with real git and bundled by the reference builder
(ops_testsupport.changes_bundles):

- for the upload and the close: a repository, commits, the bundle the worker would upload
  and the close's evidence that names it (make_changes, completion);
- for the change view: succeeded runs whose changes are stored in `ops_run_changes`
  through the service's own statement (changes/queries.py) (ChangedRuns, store)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from ac_testkit import WORKER_ID, SeededQueue
from activity_core.changes import queries
from ops_contracts import acceptance_policy_id, grant_id, parse_repository_grant
from ops_testsupport.changes_bundles import (
    build_changes_bundle,
    bundle_digest,
    commit_files,
    make_repository,
)

__all__ = [
    "HOSTILE_CONTENT",
    "HOSTILE_NAME",
    "QUOTED_NAME",
    "Changed",
    "ChangedRuns",
    "Changes",
    "completion",
    "make_changes",
]

HOSTILE_NAME = "<script>alert(1)</script>.md"
QUOTED_NAME = 'docs/a "quoted"\nname.txt'
HOSTILE_CONTENT = "</pre><script>alert(2)</script>\n"
# 1x1 PNG-like bytes with a NUL: git takes the file for binary
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))


@dataclass(frozen=True)
class Changed:
    run_id: uuid.UUID
    repo: Path
    baseline: str
    head_after: str
    commits: list[str]
    bundle: bytes


async def store(
    conn: asyncpg.Connection,
    run_id: uuid.UUID,
    attempt: int,
    bundle: bytes,
    baseline: str,
    head_after: str,
    commits: list[str],
    paths: list[str] | None = None,
) -> None:
    await conn.execute(
        queries.INSERT_IF_ABSENT,
        run_id,
        attempt,
        bundle_digest(bundle),
        len(bundle),
        baseline,
        head_after,
        commits,
        sorted(paths or []),
        bundle,
    )


class ChangedRuns:
    """Succeeded runs whose current attempt's changes are stored."""

    def __init__(self, conn: asyncpg.Connection, root: Path) -> None:
        self.conn = conn
        self.seeded = SeededQueue(conn)
        self.root = root
        self._count = 0

    async def run(self, **columns: Any) -> uuid.UUID:
        values: dict[str, Any] = {
            "state": "succeeded",
            "claim_owner": WORKER_ID,
            "attempt": 1,
            "result": {"ok": True},
            **columns,
        }
        return await self.seeded.run(**values)

    def repository(self, object_format: str = "sha1") -> tuple[Path, str]:
        self._count += 1
        repo = self.root / f"repo-{self._count}"
        return repo, make_repository(repo, object_format=object_format)

    async def changed(
        self,
        commits: list[tuple[dict[str, str | bytes | None], str]],
        *,
        attempt: int = 1,
        setup: dict[str, str | bytes | None] | None = None,
        run_attempt: int | None = None,
        object_format: str = "sha1",
    ) -> Changed:
        """A run (at `run_attempt`, default `attempt`) with the changes of `commits` stored
        for `attempt`. `setup` is committed into the baseline first."""
        repo, baseline = self.repository(object_format)
        if setup:
            baseline = commit_files(repo, setup, "setup")
        shas = [commit_files(repo, files, message) for files, message in commits]
        run_id = await self.run(attempt=run_attempt or attempt)
        bundle = build_changes_bundle(repo, baseline, shas[-1], str(run_id), attempt)
        await store(self.conn, run_id, attempt, bundle, baseline, shas[-1], shas)
        return Changed(run_id, repo, baseline, shas[-1], shas, bundle)


def now() -> datetime:
    return datetime.now(UTC)


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
