"""kill -9 of `rein-aharness run` at each step of the changes hand-over (docs/changes.md),
against activity-core served by uvicorn on real PostgreSQL: after a restart the run is
succeeded with its changes stored, matching the digest of its evidence, on the attempt
that made them; the approach ran once per attempt; replay repeated no repository work."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ac_testkit import SeededQueue
from rein_worker_kit import (
    GRANT,
    Repos,
    activity_core_app,
    exited,
    served_on_loopback,
    start_logged,
    worker_process_env,
    write_catalogue,
)

CHILD = Path(__file__).resolve().parent.parent / "changes_crash_child.py"


@pytest.fixture
async def served(db_dsn: str, db: asyncpg.Connection) -> AsyncIterator[tuple[str, SeededQueue]]:
    async with served_on_loopback(activity_core_app(db_dsn)) as url:
        yield url, SeededQueue(db)


async def _run(env: dict[str, str], point: str, log: Path, timeout: float = 60) -> int:
    child = start_logged([sys.executable, str(CHILD), point, "run", "--once"], env, log)
    return await exited(child, timeout)


async def _changes(db: asyncpg.Connection, run_id: Any) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT attempt, digest, size, head_after, bundle FROM ops_run_changes"
        " WHERE run_id = $1 ORDER BY attempt",
        run_id,
    )


@pytest.mark.parametrize(
    ("point", "steps", "attempt"),
    [
        # the close never reached the outbox: the lease lapses, attempt 2 does the work
        ("before_intent", ["enqueue"], 2),
        # the intent is durable: replay uploads from the file and closes
        ("before_upload", ["enqueue", "upload"], 1),
        # the bundle is stored: replay uploads again (200, the same digest) and closes
        ("before_close", ["enqueue", "upload", "complete"], 1),
    ],
)
async def test_a_worker_killed_during_the_hand_over_ends_with_the_changes_stored(
    served: tuple[str, SeededQueue],
    db: asyncpg.Connection,
    repos: Repos,
    tmp_path: Path,
    point: str,
    steps: list[str],
    attempt: int,
) -> None:
    url, seeded = served
    repo = repos.make()
    run_id = await seeded.run(harness_profile_ref="harness.brief@1.0.0", repository_grant=GRANT)
    lease = 3 if point == "before_intent" else 60
    env = worker_process_env(
        tmp_path, repos, write_catalogue(tmp_path / "profiles.yaml"), url, lease_seconds=lease
    )
    steps_log = tmp_path / "steps.log"
    env["CHANGES_CRASH_LOG"] = str(steps_log)
    log = tmp_path / "worker.log"
    changes_dir = tmp_path / "state" / "changes"

    assert await _run(env, point, log) == -signal.SIGKILL, log.read_text()[-2000:]
    assert steps_log.read_text().split() == steps
    landed_first = Repos.landings(repo)
    assert list(landed_first) == [f"refs/heads/rein/{run_id}/1"]
    assert len(list(changes_dir.iterdir())) == 1  # the bundle was durable before landing
    if point == "before_close":
        [stored] = await _changes(db, run_id)
        assert stored["attempt"] == 1
    else:
        assert await _changes(db, run_id) == []

    if point == "before_intent":
        await asyncio.sleep(lease + 1)  # the lease lapses: the run is claimed again
    assert await _run(env, "none", log) == 0, log.read_text()[-2000:]

    row = await seeded.row(run_id)
    assert row["state"] == "succeeded", row["last_error"]
    assert row["attempt"] == attempt
    transaction = row["result"]["repository_transaction"]
    [stored] = await _changes(db, run_id)  # one row: never on another attempt
    assert stored["attempt"] == attempt
    assert stored["digest"] == transaction["changes_digest"]
    assert "sha256:" + hashlib.sha256(bytes(stored["bundle"])).hexdigest() == stored["digest"]
    assert stored["head_after"] == row["result"]["head_after"]
    # the approach ran once per attempt: each attempt landed its own branch, once
    landings = Repos.landings(repo)
    assert list(landings) == [f"refs/heads/rein/{run_id}/{n}" for n in range(1, attempt + 1)]
    assert landings[f"refs/heads/rein/{run_id}/1"] == landed_first[f"refs/heads/rein/{run_id}/1"]
    # replay did no repository work: after the restart, nothing but the delivery
    later = steps_log.read_text().split()[len(steps) :]
    if attempt == 1:
        assert "enqueue" not in later and later[-1] == "complete"
    # delivered: the bundle file is gone, and the earlier attempt's orphan was pruned
    assert list(changes_dir.iterdir()) == []
