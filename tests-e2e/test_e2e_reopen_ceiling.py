"""Three failures with `reopen: true`: a `command` profile whose command always runs out
of its time budget (the worker fails a timed-out approach with reopen, see rein-aharness
gateway/errors.py). Attempts 1 and 2 are reopened; attempt 3 is at OPS_RUN_MAX_ATTEMPTS
and ends the run `failed`."""

from __future__ import annotations

from e2e_kit.git import landing_branches
from e2e_kit.stack import Stack, delivered_closes, log_lines, outbox, ui_facts
from ops_demo.repository import git

SLUG = "e2e-reopen"


def test_three_reopened_failures_end_the_run_failed_at_the_attempt_ceiling(stack: Stack) -> None:
    repository = stack.repositories / "e2e" / "reopen"
    baseline = git(repository, "rev-parse", "HEAD")
    config = stack.worker_config("e2e-reopen", lease_seconds=10)
    stack.worker(config, [SLUG])

    fire_run_id = stack.fire(SLUG)
    row = stack.wait_for_run(
        SLUG, "failed", timeout=60, what="the run to fail at the attempt ceiling"
    )
    run_id = str(row["id"])

    assert (row["attempt"], row["claim_owner"], row["lease_until"]) == (3, "e2e-reopen", None)
    assert "timed out" in row["last_error"]
    pending, delivered = outbox(config.state_dir).for_run(run_id)
    assert pending == []
    closes = delivered_closes(delivered)
    assert closes == [
        (f"rtx-{run_id}.1", "fail", True, "reopened"),
        (f"rtx-{run_id}.2", "fail", True, "reopened"),
        (f"rtx-{run_id}.3", "fail", True, "applied"),
    ]
    serve = stack.serves[0][0]
    assert [
        line["message"]
        for line in log_lines(serve)
        if line.get("run_id") == run_id and line["message"].startswith("run fail")
    ] == ["run fail reopened", "run fail reopened", "run fail applied"]
    # nothing landed, nothing changed in the repository
    assert landing_branches(repository) == {}
    assert git(repository, "rev-parse", "main") == baseline

    page = stack.ui_run(SLUG, fire_run_id)
    assert ui_facts(page, run_id) == {
        "state": "failed",
        "attempt": "3",
        "claim_owner": "e2e-reopen",
    }
    assert row["last_error"] in page
