"""The answer to `complete` is lost after activity-core applied it (a proxy forwards the
request and drops the response): the worker keeps the close in its outbox, replays it
when it starts again, and activity-core answers `reconciled`; the repository work is
not repeated."""

from __future__ import annotations

import json

from e2e_kit.git import commits_on, landing_branches
from e2e_kit.proxy import DroppingProxy
from e2e_kit.stack import Stack, log_lines, outbox, ui_facts
from ops_demo.repository import git
from ops_devsupport.processes import console_script

SLUG = "e2e-lost"


def test_a_lost_complete_answer_is_kept_replayed_at_the_next_start_and_reconciled(
    stack: Stack, proxy: DroppingProxy
) -> None:
    repository = stack.repositories / "e2e" / "lost"
    baseline = git(repository, "rev-parse", "HEAD")
    config = stack.worker_config("e2e-lost", url=proxy.url)
    worker = stack.worker(config, [SLUG])

    fire_run_id = stack.fire(SLUG)
    row = stack.wait_for_run(
        SLUG, "succeeded", timeout=30, what="activity-core to apply the completion"
    )
    run_id = str(row["id"])
    stack.wait(
        lambda: proxy.dropped and outbox(config.state_dir).for_run(run_id)[0],
        timeout=30,
        what="the worker to keep the unanswered close pending",
    )
    # stopped while the close is undelivered: it says so with its exit code
    assert worker.stop() == 1
    (entry,) = outbox(config.state_dir).pending
    assert entry["run_id"] == run_id
    assert entry["intent"]["action"] == "complete"
    assert entry["attempts"] >= 1
    status = stack.sup.run(
        "close-outbox-status",
        [str(console_script("rein-aharness")), "close-outbox", "status", "--json"],
        env=config.env(),
        check=False,
    )
    assert status.returncode == 1, status.output
    assert run_id in status.output
    head = json.loads(row["result"])["head_after"]
    assert landing_branches(repository) == {f"rein/{run_id}/1": head}

    proxy.pass_through()
    worker.start()
    stack.wait(
        lambda: not outbox(config.state_dir).pending,
        timeout=30,
        what="the restarted worker to replay the pending close",
    )

    box = outbox(config.state_dir)
    assert box.quarantined == []
    pending, delivered = box.for_run(run_id)
    assert pending == []
    assert [e["disposition"] for e in delivered] == ["reconciled"]
    assert delivered[0]["intent_digest"] == row["close_intent_digest"]
    assert stack.ops_run(row["id"]) == row  # the replay changed nothing
    # every dropped answer was activity-core's 200: applied first, reconciled after
    assert proxy.dropped and {status for _, status in proxy.dropped} == {200}
    serve = stack.serves[0][0]
    dispositions = [
        line["disposition"]
        for line in log_lines(serve)
        if line.get("run_id") == run_id and line["message"].startswith("run complete")
    ]
    assert dispositions[0] == "applied"
    assert dispositions[-1] == "reconciled"
    assert set(dispositions[1:]) == {"reconciled"}
    # the work was done once: one landing branch, one commit, no second attempt
    assert landing_branches(repository) == {f"rein/{run_id}/1": head}
    assert commits_on(repository, f"rein/{run_id}/1", baseline) == [head]
    assert row["attempt"] == 1
    page = stack.ui_run(SLUG, fire_run_id)
    assert ui_facts(page, run_id) == {
        "state": "succeeded",
        "attempt": "1",
        "claim_owner": "e2e-lost",
    }
    # the completion event went out once the worker learnt the close was accepted
    events = [r.body for r in stack.hub.received("/events") if r.body["run_id"] == run_id]
    assert [e["close_disposition"] for e in events] == ["reconciled"]
