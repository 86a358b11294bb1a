"""An operator cancels a run a real worker is executing: the worker learns it from its next
heartbeat (refused state_conflict: its LeaseKeeper's "lease lost"), stops the approach and
its sandbox, removes the worktree and closes nothing; the row is failed with the reason,
nothing is left in the worker's outbox and none of the run's work lands."""

from __future__ import annotations

import time
from datetime import datetime

import httpx

from e2e_kit.git import landing_branches
from e2e_kit.stack import (
    Stack,
    approach_processes,
    approaches,
    closes_of,
    log_lines,
    outbox,
    processes_under,
)
from ops_demo.repository import git

SLUG = "e2e-cancel"
WORKER = "e2e-cancel"
LEASE_SECONDS = 3  # a heartbeat every second
REASON = "wrong target: INC-1234"


def test_a_run_cancelled_mid_execution_stops_its_worker_within_one_heartbeat(stack: Stack) -> None:
    repository = stack.repositories / "e2e" / "cancel"
    baseline = git(repository, "rev-parse", "HEAD")
    config = stack.worker_config(WORKER, lease_seconds=LEASE_SECONDS)
    worker = stack.worker(config, [SLUG])
    interval = LEASE_SECONDS / 3

    stack.fire(SLUG)
    row = stack.wait_for_run(SLUG, "claimed", timeout=30, what="the worker to claim the run")
    run_id = str(row["id"])
    stack.wait(
        lambda: (run_id, 1) in approaches([worker]) and approach_processes(run_id, 1),
        timeout=30,
        what="the run's command to start in its sandbox",
    )
    # it heartbeats while its command sleeps
    stack.wait(
        lambda: stack.ops_run(row["id"])["lease_until"] > row["lease_until"],
        timeout=10,
        what="a heartbeat to extend the lease",
    )

    # the operator cancels through the other replica than the one the worker talks to
    sent = time.time()
    with httpx.Client(base_url=stack.url(1), timeout=15) as api:
        response = api.post(
            f"/ops-runs/{run_id}/cancel",
            json={"reason": REASON},
            headers={"Authorization": f"Bearer {stack.config.operator_token}"},
        )
    assert response.status_code == 200, response.text
    assert (response.json()["state"], response.json()["close_disposition"]) == ("failed", "applied")

    lost = stack.wait(
        lambda: next(
            (
                line
                for line in log_lines(worker)
                if line.get("message") == "lease lost; abandoning the run"
                and line.get("run_id") == run_id
            ),
            None,
        ),
        timeout=10,
        what="the worker to learn of the cancel",
    )
    assert lost["reason"] == "heartbeat refused: state_conflict"
    # within one heartbeat interval (and the time its refused request took)
    learned = datetime.fromisoformat(lost["ts"]).timestamp() - sent
    assert learned <= interval + 0.5, learned

    # the approach and its sandbox stop; the worktree goes; the worker goes on
    stack.wait(
        lambda: not approach_processes(run_id, 1),
        timeout=10,
        what="the cancelled command's sandbox to end",
    )
    finished = [
        line
        for line in log_lines(worker)
        if line.get("message") == "approach finished" and line.get("run_id") == run_id
    ]
    assert [line["ended"] for line in finished] == ["cancelled"]
    worktrees = config.state_dir / "worktrees"
    stack.wait(
        lambda: not processes_under([worktrees]) and not any(worktrees.iterdir()),
        timeout=15,
        what="the cancelled run's worktree to be removed",
    )
    assert worker.alive, "the worker stopped instead of going on"

    # the row: failed by the operator, with the reason; untouched by the worker since
    row = stack.ops_run(row["id"])
    assert (row["state"], row["claim_owner"], row["lease_until"]) == ("failed", None, None)
    assert row["cancelled_by"] == "operator"
    assert row["last_error"] == (
        f"cancelled by operator operator while {WORKER} held attempt 1: {REASON}"
    )
    assert row["close_intent_digest"] is None and row["result"] is None

    worker.stop()
    # nothing pending, delivered or quarantined for it: the worker closed nothing
    box = outbox(config.state_dir)
    assert box.for_run(run_id) == ([], [])
    assert box.pending == [] and box.quarantined == []
    serve_lines = stack.serve_lines()
    closes = closes_of(serve_lines, run_id)
    assert closes == []
    cancelled = [
        line
        for line in serve_lines
        if line.get("run_id") == run_id and line["message"] == "run cancelled by operator operator"
    ]
    assert [(line["worker_id"], line["attempt"]) for line in cancelled] == [(WORKER, 1)]
    # and none of its work landed
    assert landing_branches(repository) == {}
    assert git(repository, "rev-parse", "HEAD") == baseline
    assert stack.ops_run(row["id"]) == row
