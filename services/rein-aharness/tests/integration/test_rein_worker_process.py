"""`rein-aharness run --once` as a real process against activity-core served by uvicorn.

The Done-when demonstration: a worker killed with SIGKILL mid-close, started again,
delivers the close exactly once (`reconciled`), and never repeats the repository work.
A proxy in front of activity-core lets the complete request through (activity-core
applies it) and then withholds the answer, so the worker is provably blocked inside the
delivery when it is killed: no test-only hook in the worker is needed.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

from ops_devsupport.processes import processes_working_under
from rein_aharness.outbox import OutboxStore
from rein_worker_kit import (
    GRANT,
    Repos,
    ServedQueue,
    command_profile,
    exited,
    kill,
    processes_of_run,
    served_behind,
    start_worker,
    started_in_a_worktree,
    write_catalogue,
)

Scope = dict[str, Any]


class HoldingProxy:
    """ASGI middleware: while `hold` is set, a `/complete` request is applied by
    activity-core but its answer is never sent; `held` is set once that has happened."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.hold = True
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.withheld: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.hold and scope["path"].endswith("/complete"):

            async def swallow(message: dict[str, Any]) -> None:
                self.withheld.append(message)

            await self.inner(scope, receive, swallow)
            self.held.set()
            await self.release.wait()
            return
        await self.inner(scope, receive, send)


Served = ServedQueue[HoldingProxy]


served = served_behind(HoldingProxy)


def _working_in(root: Path) -> list[int]:
    """Pids of processes whose working directory is under `root`."""
    return processes_working_under([root])


def _log_lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


async def test_a_worker_killed_mid_close_delivers_the_close_exactly_once_after_restart(
    served: Served, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    commits_before = Repos.commit_count(repo)
    run_id = await served.seeded.run(
        harness_profile_ref="harness.brief@1.0.0", repository_grant=GRANT
    )
    env = served.worker_env(
        tmp_path, repos, write_catalogue(tmp_path / "profiles.yaml"), lease_seconds=3
    )
    log = tmp_path / "worker.log"

    first = start_worker(env, log)
    try:
        async with asyncio.timeout(30):
            await served.middleware.held.wait()
    finally:
        kill(first)  # SIGKILL while the worker waits for the complete's answer
    assert first.returncode == -signal.SIGKILL

    # activity-core applied the close; the worker never heard; its outbox entry is pending
    applied = json.loads(
        b"".join(
            m.get("body", b"")
            for m in served.middleware.withheld
            if m["type"] == "http.response.body"
        )
    )
    assert applied["close_disposition"] == "applied"
    closed = await served.seeded.row(run_id)
    assert closed["state"] == "succeeded"
    store = OutboxStore(tmp_path / "state" / "close-outbox")
    [pending] = store.snapshot().pending
    assert (pending.run_id, pending.action, pending.attempts) == (str(run_id), "complete", 1)
    assert Repos.commit_count(repo) == commits_before + 1
    landings = Repos.landings(repo)
    assert list(landings) == [f"refs/heads/rein/{run_id}/1"]

    served.middleware.hold = False
    second = start_worker(env, log)
    assert await exited(second) == 0

    # delivered exactly once more, as the exact repeat: reconciled, the row untouched
    [delivered] = (tmp_path / "state" / "close-outbox" / "delivered").iterdir()
    record = json.loads(delivered.read_bytes())
    assert (record["run_id"], record["disposition"], record["attempts"]) == (
        str(run_id),
        "reconciled",
        2,
    )
    row = await served.seeded.row(run_id)
    assert (row["state"], row["updated_at"], row["result"], row["attempt"]) == (
        "succeeded",
        closed["updated_at"],
        closed["result"],
        1,
    )
    # the repository work was not repeated
    assert Repos.commit_count(repo) == commits_before + 1
    assert Repos.landings(repo) == landings
    assert store.snapshot().pending == ()
    events = [line for line in _log_lines(log) if line["logger"] == "rein_aharness.events"]
    assert [json.loads(e["message"])["close_disposition"] for e in events] == ["reconciled"]


async def test_a_worker_killed_mid_execution_leaves_nothing_behind_and_the_run_is_redone(
    served: Served, repos: Repos, tmp_path: Path
) -> None:
    served.middleware.hold = False
    repo = repos.make()
    refs_before = Repos.refs(repo)
    script = (
        'if [ "$REIN_RUN_ATTEMPT" = 1 ]; then touch started; sleep 30; fi; '
        "echo done > briefs/redo.md && git add briefs && git commit -qm redo"
    )
    catalogue = write_catalogue(tmp_path / "profiles.yaml", command_profile("redo", script))
    run_id = await served.seeded.run(
        harness_profile_ref="harness.redo@1.0.0", repository_grant=GRANT
    )
    env = served.worker_env(tmp_path, repos, catalogue, lease_seconds=3)
    log = tmp_path / "worker.log"

    first = start_worker(env, log)
    try:
        async with asyncio.timeout(30):
            while not started_in_a_worktree(tmp_path / "state"):
                await asyncio.sleep(0.05)
        assert processes_of_run(run_id)
    finally:
        kill(first)
    worktrees = tmp_path / "state" / "worktrees"
    names = sorted(p.name for p in worktrees.iterdir())
    assert names == [f"{run_id}.1", f"{run_id}.1.scratch"]  # killed mid-work
    # the sandbox dies with the worker (die-with-parent), whatever it started with it
    async with asyncio.timeout(10):
        while processes_of_run(run_id):
            await asyncio.sleep(0.05)
    assert Repos.refs(repo) == refs_before
    assert OutboxStore(tmp_path / "state" / "close-outbox").snapshot().pending == ()

    await served.seeded.expire_lease(run_id)
    second = start_worker(env, log)
    assert await exited(second) == 0

    row = await served.seeded.row(run_id)
    assert (row["state"], row["attempt"]) == ("succeeded", 2)
    assert list(Repos.landings(repo)) == [f"refs/heads/rein/{run_id}/2"]
    assert list(worktrees.iterdir()) == []  # the leftover was swept, the new one removed
    assert _working_in(worktrees) == []  # and the orphaned approach was killed
    assert len(Repos.worktrees(repo)) == 1


async def test_sigterm_abandons_a_run_cleanly_after_the_grace_period(
    served: Served, repos: Repos, tmp_path: Path
) -> None:
    served.middleware.hold = False
    repo = repos.make()
    refs_before = Repos.refs(repo)
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml", command_profile("slow", "touch started; sleep 30")
    )
    run_id = await served.seeded.run(
        harness_profile_ref="harness.slow@1.0.0", repository_grant=GRANT
    )
    env = served.worker_env(tmp_path, repos, catalogue, lease_seconds=3)
    env.update({"REIN_AHARNESS_SHUTDOWN_GRACE_SECONDS": "0.5", "REIN_AHARNESS_WAIT_SECONDS": "5"})
    log = tmp_path / "worker.log"

    worker = start_worker(env, log, "--labels", "automated")  # the loop, not --once
    try:
        async with asyncio.timeout(30):
            while not started_in_a_worktree(tmp_path / "state"):
                await asyncio.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
    assert await exited(worker, timeout=15) == 0

    row = await served.seeded.row(run_id)
    assert (row["state"], row["result"]) == ("claimed", None)  # nothing closed; lease expires
    assert OutboxStore(tmp_path / "state" / "close-outbox").snapshot().pending == ()
    assert list((tmp_path / "state" / "worktrees").iterdir()) == []
    assert _working_in(tmp_path / "state" / "worktrees") == []
    assert Repos.refs(repo) == refs_before
    messages = [line["message"] for line in _log_lines(log)]
    assert "abandoning the current run; its lease will expire" in messages
