"""A worker with a wrong token, and one presenting another worker's token under its own
id: neither claims anything, each says why in its log, and the run stays open for a
worker with the right credential."""

from __future__ import annotations

import json

import httpx

from e2e_kit.git import landing_branches
from e2e_kit.stack import Stack, log_lines, new_token, outbox, ui_facts
from ops_devsupport.processes import ManagedProcess

SLUG = "e2e-auth"


def _claim_failures(process: ManagedProcess) -> list[str]:
    return [
        line["message"] for line in log_lines(process) if line["message"].startswith("claim failed")
    ]


def _refusals(stack: Stack, code: str) -> float:
    metrics = httpx.get(f"{stack.url(0)}/metrics", timeout=10).text
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("ops_run_refusals_total{") and f'code="{code}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_worker_with_a_wrong_or_foreign_token_claims_nothing(stack: Stack) -> None:
    wrong = stack.worker(stack.worker_config("e2e-auth-wrong-token", token=new_token()), [SLUG])
    foreign = stack.worker(
        stack.worker_config("e2e-auth-other-id", token=stack.tokens["e2e-auth-right"]), [SLUG]
    )
    unauthenticated_before = _refusals(stack, "unauthenticated")
    mismatch_before = _refusals(stack, "worker_identity_mismatch")

    fire_run_id = stack.fire(SLUG)
    row = stack.wait(lambda: next(iter(stack.ops_runs(SLUG)), None), timeout=30, what="the run")
    seen = {process.name: len(_claim_failures(process)) for process in (wrong, foreign)}
    # both keep trying (with back-off) after the run is open, and keep being refused
    stack.wait(
        lambda: all(len(_claim_failures(p)) >= seen[p.name] + 2 for p in (wrong, foreign)),
        timeout=30,
        what="both workers to be refused twice more",
    )

    assert set(_claim_failures(wrong)) == {
        "claim failed: activity-core answered 401 unauthenticated"
    }
    assert set(_claim_failures(foreign)) == {
        "claim failed: activity-core answered 403 worker_identity_mismatch"
    }
    assert wrong.alive and foreign.alive  # a refusal is a configuration problem, not a crash
    row = stack.ops_run(row["id"])
    assert (row["state"], row["attempt"], row["claim_owner"]) == ("open", 0, None)
    page = stack.ui_run(SLUG, fire_run_id)
    assert ui_facts(page, row["id"]) == {"state": "open", "attempt": "0", "claim_owner": "—"}
    for process in (wrong, foreign):
        box = outbox(stack.root / "workers" / process.name.removeprefix("worker-"))
        assert (box.pending, box.delivered, box.quarantined) == ([], [], [])
    assert landing_branches(stack.repositories / "e2e" / "auth") == {}
    assert _refusals(stack, "unauthenticated") > unauthenticated_before
    assert _refusals(stack, "worker_identity_mismatch") > mismatch_before

    wrong.stop()
    foreign.stop()
    stack.worker(stack.worker_config("e2e-auth-right"), [SLUG])
    row = stack.wait(
        lambda: (r := stack.ops_run(row["id"]))["state"] == "succeeded" and r,
        timeout=30,
        what="the right worker to complete the run",
    )
    assert (row["attempt"], row["claim_owner"]) == (1, "e2e-auth-right")
    head = json.loads(row["result"])["head_after"]
    assert landing_branches(stack.repositories / "e2e" / "auth") == {f"rein/{row['id']}/1": head}
    assert ui_facts(stack.ui_run(SLUG, fire_run_id), row["id"])["state"] == "succeeded"
