"""A worker is killed with SIGKILL while its approach runs: the lease ends, a second
worker (on the other serve replica) claims attempt 2 and completes it; the first worker,
restarted, sweeps what it left behind and closes nothing."""

from __future__ import annotations

import json

from e2e_kit.git import commits_on, landing_branches
from e2e_kit.stack import (
    Stack,
    approach_processes,
    approaches,
    closes_of,
    log_lines,
    outbox,
    processes_under,
    ui_facts,
)
from ops_demo.repository import git

SLUG = "e2e-kill"


def test_a_worker_killed_mid_execution_loses_its_lease_to_another_that_completes(
    stack: Stack,
) -> None:
    repository = stack.repositories / "e2e" / "kill"
    baseline = git(repository, "rev-parse", "HEAD")
    # worker 1: a 3 s lease (a heartbeat every second), so its lease ends soon after it
    # dies; worker 2 (on the other replica) takes its time
    first_config = stack.worker_config("e2e-kill-1", lease_seconds=3)
    second_config = stack.worker_config("e2e-kill-2", lease_seconds=30, url=stack.url(1))
    first = stack.worker(first_config, [SLUG])

    fire_run_id = stack.fire(SLUG)
    row = stack.wait_for_run(SLUG, "claimed", timeout=30, what="worker 1 to claim the run")
    run_id = str(row["id"])
    assert (row["claim_owner"], row["attempt"]) == ("e2e-kill-1", 1)
    stack.wait(
        lambda: (run_id, 1) in approaches([first]) and approach_processes(run_id, 1),
        timeout=30,
        what="attempt 1's command to start",
    )
    second = stack.worker(second_config, [SLUG])

    assert first.kill() == -9  # mid-execution: its command sleeps for a minute
    # its sandbox dies with it (die-with-parent), all that attempt 1 started with it
    stack.wait(
        lambda: not approach_processes(run_id, 1),
        timeout=10,
        what="attempt 1's sandbox to die with its worker",
    )

    row = stack.wait(
        lambda: (r := stack.ops_run(row["id"]))["state"] == "succeeded" and r,
        timeout=30,
        what="worker 2 to complete attempt 2",
    )
    assert (row["attempt"], row["claim_owner"]) == (2, "e2e-kill-2")
    result = json.loads(row["result"])
    assert result["repository_transaction"]["transaction_id"] == f"rtx-{run_id}.2"
    # the lease of attempt 1 ended on its own (reclaimed by a claim, no operator call)
    serve_lines = stack.serve_lines()
    ended = [
        line
        for line in serve_lines
        if line.get("run_id") == run_id and line["message"] == "stale lease reopened"
    ]
    assert [line["worker_id"] for line in ended] == ["e2e-kill-1"]

    # worker 1 comes back: it sweeps its dead worktree, replays nothing, closes nothing
    first.restart()
    stack.wait(
        lambda: any(
            "worktrees left by an earlier run" in line["message"] for line in log_lines(first)
        ),
        timeout=15,
        what="worker 1 to sweep the worktree it left",
    )
    worktrees = first_config.state_dir / "worktrees"
    stack.wait(
        lambda: not processes_under([worktrees]) and not any(worktrees.iterdir()),
        timeout=15,
        what="the worktree of attempt 1 to be gone",
    )
    second.stop()
    first.stop()

    assert stack.ops_run(row["id"]) == row  # untouched since worker 2's close
    first_box = outbox(first_config.state_dir)
    assert first_box.for_run(run_id) == ([], [])
    assert first_box.pending == [] and first_box.quarantined == []
    second_box = outbox(second_config.state_dir)
    pending, delivered = second_box.for_run(run_id)
    assert pending == []
    assert [(e["transaction_id"], e["disposition"]) for e in delivered] == [
        (f"rtx-{run_id}.2", "applied")
    ]
    closes = closes_of(stack.serve_lines(), run_id)
    assert {line["worker_id"] for line in closes} == {"e2e-kill-2"}

    # the repository: only attempt 2's work landed, one commit
    head = result["head_after"]
    assert landing_branches(repository) == {f"rein/{run_id}/2": head}
    assert commits_on(repository, f"rein/{run_id}/2", baseline) == [head]
    page = stack.ui_run(SLUG, fire_run_id, replica=1)
    assert ui_facts(page, run_id) == {
        "state": "succeeded",
        "attempt": "2",
        "claim_owner": "e2e-kill-2",
    }
    # executed once per attempt, each in the sandbox
    assert approaches([first, second]) == [(run_id, 1), (run_id, 2)]
    started = [
        line
        for worker in (first, second)
        for line in log_lines(worker)
        if line.get("message") == "approach started"
    ]
    assert {line["sandbox_profile"] for line in started} == {"profile.bwrap-local"}
