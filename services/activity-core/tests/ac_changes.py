"""Runs with stored changes for the change view's tests: a history made with real git, its
bundle made by the reference builder (ops_testsupport.changes_bundles), stored in
`ops_run_changes` through the service's own statement (changes/queries.py)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from ac_testkit import WORKER_ID, SeededQueue
from activity_core.changes import queries
from ops_testsupport.changes_bundles import (
    build_changes_bundle,
    bundle_digest,
    commit_files,
    make_repository,
)

__all__ = ["HOSTILE_CONTENT", "HOSTILE_NAME", "QUOTED_NAME", "Changed", "ChangedRuns"]

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
