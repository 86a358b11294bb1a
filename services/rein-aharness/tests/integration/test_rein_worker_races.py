"""Races with the queue, with `rein-aharness run --once` as a real process against
activity-core served by uvicorn on real PostgreSQL, through a stand-in in front of it:

* the lease's deadline: the stand-in holds every heartbeat without answering (a peer
  that accepted the request and went silent), so the worker's heartbeat neither succeeds
  nor fails until its read timeout and retries, about two minutes. The lease's deadline
  must end the approach regardless, before activity-core may reopen the run;
* a cancel racing a close: when the run's close arrives, the stand-in first has an
  operator cancel the run through activity-core's API, then passes the close on (the
  approach has finished and landed; the close has not been taken).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ac_testkit import OPERATOR_TOKEN
from rein_aharness.outbox import OutboxStore
from rein_worker_kit import (
    GRANT,
    WORKER_BIN,
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

LEASE_SECONDS = 3
MARGIN_SECONDS = 0.5  # worker/lease.py: lease_margin(3), its floor

Scope = dict[str, Any]


@dataclass
class StandIn:
    """ASGI middleware before activity-core. `hold_heartbeats`: a heartbeat is read and
    never answered (until `release`). `cancel_before_close`: a complete or fail first has
    the operator cancel its run (the cancel's answer in `cancels`), then goes on; its
    answer is kept in `closes`. The claim's arrival is timed (`claimed_at`,
    time.monotonic) on its way in."""

    inner: Any
    hold_heartbeats: bool = False
    cancel_before_close: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    claimed_at: float | None = None
    held: int = 0
    cancels: list[httpx.Response] = field(default_factory=list)
    closes: list[tuple[int, bytes]] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if self.hold_heartbeats and path.endswith("/heartbeat"):
            self.held += 1
            await self.release.wait()
            return
        if path.endswith("/claim"):
            self.claimed_at = time.monotonic()
        if self.cancel_before_close and path.endswith(("/complete", "/fail")):
            run_id = path.split("/")[-2]
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=self.inner), base_url="http://ac.test"
            ) as operator:
                self.cancels.append(
                    await operator.post(
                        f"/ops-runs/{run_id}/cancel",
                        json={"reason": "not needed after all"},
                        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                    )
                )
            answer: dict[str, Any] = {"status": 0, "body": b""}

            async def keep(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    answer["status"] = message["status"]
                elif message["type"] == "http.response.body":
                    answer["body"] += message.get("body", b"")
                await send(message)

            await self.inner(scope, receive, keep)
            self.closes.append((answer["status"], answer["body"]))
            return
        await self.inner(scope, receive, send)


Served = ServedQueue[StandIn]


served = served_behind(StandIn)


def _kill_run(run_id: object) -> None:
    for pid in processes_of_run(str(run_id)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_a_heartbeat_held_past_the_lease_ends_the_approach_at_the_deadline(
    served: Served, repos: Repos, tmp_path: Path
) -> None:
    served.middleware.hold_heartbeats = True
    repo = repos.make()
    refs_before = Repos.refs(repo)
    # Commits (and would land) only if it outlived its lease by far.
    script = "touch started; sleep 30; echo late > briefs/late.md; git add -A; git commit -qm late"
    catalogue = write_catalogue(tmp_path / "profiles.yaml", command_profile("slow", script))
    run_id = await served.seeded.run(
        harness_profile_ref="harness.slow@1.0.0", repository_grant=GRANT
    )
    log = tmp_path / "worker.log"
    worker = start_worker(
        served.worker_env(tmp_path, repos, catalogue, lease_seconds=LEASE_SECONDS), log
    )
    # Tolerance 1.0 s either side of the window: the claim's arrival is timed here, a
    # little after the worker sent it (the lower side: the lease is counted from the send,
    # and the process list is polled every 50 ms); after the deadline the worker still
    # has to deliver the cancellation, SIGKILL the sandbox's session and reap it, on two
    # cores shared with other test runs (the upper side; measured ~0.1 s when idle).
    # Before the fix, the approach outlived the lease by the heartbeat's timeouts and
    # retries (about two minutes), so the window cannot be met by chance.
    tolerance = 1.0
    earliest = LEASE_SECONDS - MARGIN_SECONDS - tolerance
    latest = LEASE_SECONDS + tolerance
    try:
        async with asyncio.timeout(30):
            while not (started_in_a_worktree(tmp_path / "state") and processes_of_run(run_id)):
                await asyncio.sleep(0.05)
        claimed_at = served.middleware.claimed_at
        assert claimed_at is not None
        gone_at: float | None = None
        while time.monotonic() < claimed_at + latest + 5:
            if not processes_of_run(run_id):
                gone_at = time.monotonic()
                break
            await asyncio.sleep(0.05)
        assert gone_at is not None, "the approach outlived its lease"
        assert served.middleware.held >= 1  # a heartbeat was in flight, unanswered
        assert earliest <= gone_at - claimed_at <= latest, gone_at - claimed_at
        assert await exited(worker, timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            kill(worker)
        _kill_run(run_id)

    # nothing landed, nothing closed: the row waits for its lease to end on the server
    row = await served.seeded.row(run_id)
    assert (row["state"], row["result"], row["attempt"]) == ("claimed", None, 1)
    assert Repos.refs(repo) == refs_before
    assert Repos.landings(repo) == {}
    store = OutboxStore(tmp_path / "state" / "close-outbox")
    snapshot = store.snapshot()
    assert (snapshot.pending, snapshot.delivered_count) == ((), 0)
    assert list((tmp_path / "state" / "worktrees").iterdir()) == []
    assert "the lease's deadline passed" in log.read_text()


async def test_a_run_cancelled_before_its_close_arrives_is_settled_and_its_branch_withdrawn(
    served: Served, repos: Repos, tmp_path: Path
) -> None:
    served.middleware.cancel_before_close = True
    repo = repos.make()
    refs_before = Repos.refs_outside_landings(repo)
    run_id = await served.seeded.run(
        harness_profile_ref="harness.brief@1.0.0", repository_grant=GRANT
    )
    env = served.worker_env(
        tmp_path, repos, write_catalogue(tmp_path / "profiles.yaml"), lease_seconds=LEASE_SECONDS
    )
    env["REIN_AHARNESS_LEASE_SECONDS"] = "60"  # no heartbeat before the close
    log = tmp_path / "worker.log"
    with log.open("ab") as out:
        # in a thread: this loop serves activity-core meanwhile
        worker = await asyncio.to_thread(
            subprocess.run,
            [str(WORKER_BIN), "run", "--once"],
            env=env,
            stdout=out,
            stderr=out,
            timeout=60,
        )
    assert worker.returncode == 0, log.read_text()

    # the close met the cancel: terminal_conflict, its detail naming the operator
    [cancel] = served.middleware.cancels
    assert cancel.status_code == 200, cancel.text
    [(status, body)] = served.middleware.closes
    assert status == 409
    assert json.loads(body)["code"] == "terminal_conflict"
    row = await served.seeded.row(run_id)
    assert (row["state"], row["cancelled_by"], row["result"]) == ("failed", "operator", None)

    # settled, not quarantined: the readiness probe stays ready
    status_run = subprocess.run(
        [str(WORKER_BIN), "close-outbox", "status", "--json"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert status_run.returncode == 0, status_run.stdout + status_run.stderr
    report = json.loads(status_run.stdout)
    assert report["counts"] == {"pending": 0, "delivered": 1, "quarantined": 0}
    [delivered] = (tmp_path / "state" / "close-outbox" / "delivered").iterdir()
    record = json.loads(delivered.read_bytes())
    assert (record["run_id"], record["disposition"]) == (str(run_id), "cancelled")
    assert not (tmp_path / "state" / "close-outbox" / "quarantine").exists() or not list(
        (tmp_path / "state" / "close-outbox" / "quarantine").iterdir()
    )

    # the landed branch was withdrawn; nothing else changed
    assert Repos.landings(repo) == {}
    assert Repos.refs_outside_landings(repo) == refs_before
    assert "landing withdrawn: the run will not be closed as succeeded" in log.read_text()
