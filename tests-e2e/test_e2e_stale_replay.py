"""A close decided under attempt 1 arrives only after the same worker identity claimed
attempt 2: it is fenced off (409 expired_lease), attempt 2's close is applied, and the row
records attempt 2's evidence.

Worker A (identity `e2e-stale`, 3 s lease) completes attempt 1, but a proxy holds its
`complete`. A's lease ends; worker B, the same identity on another state directory (as a
rescheduled pod would be), claims attempt 2, whose command takes 8 s. While B works, the
proxy lets attempt 1's `complete` go on. Without fencing it would be applied to attempt 2:
same owner, active lease."""

from __future__ import annotations

import json

from e2e_kit.git import landing_branches
from e2e_kit.proxy import DroppingProxy
from e2e_kit.stack import Stack, approaches, outbox

SLUG = "e2e-stale"
WORKER = "e2e-stale"


def test_a_close_held_past_its_attempt_is_refused_and_the_later_attempt_applies(
    stack: Stack, proxy: DroppingProxy
) -> None:
    proxy.pass_through()
    proxy.hold_completes()
    repository = stack.repositories / "e2e" / "stale"
    first_config = stack.worker_config(
        WORKER, url=proxy.url, lease_seconds=3, state_dir=stack.root / "workers" / "e2e-stale-a"
    )
    second_config = stack.worker_config(
        WORKER, lease_seconds=30, state_dir=stack.root / "workers" / "e2e-stale-b"
    )
    first = stack.worker(first_config, [SLUG], name="worker-e2e-stale-a")

    stack.fire(SLUG)
    stack.wait(lambda: proxy.held, timeout=30, what="attempt 1's complete to reach the proxy")
    run_id = proxy.held[0].split("/")[2]
    stack.wait(
        lambda: stack.db.fetchval(
            "SELECT lease_until < now() FROM ops_runs WHERE id = $1::uuid", run_id
        ),
        timeout=15,
        what="attempt 1's lease to end",
    )

    second = stack.worker(second_config, [SLUG], name="worker-e2e-stale-b")
    stack.wait(
        lambda: (run_id, 2) in approaches([second]),
        timeout=30,
        what="the same identity to claim attempt 2 and start it",
    )
    row = stack.ops_run(run_id)
    assert (row["state"], row["attempt"], row["claim_owner"]) == ("claimed", 2, WORKER)

    proxy.release()  # attempt 1's complete arrives while attempt 2 holds the lease
    answers = stack.wait(
        lambda: proxy.complete_answers,
        timeout=30,
        what="activity-core to answer attempt 1's complete",
    )
    assert {status for _path, status, _body in answers} == {409}
    assert {json.loads(body)["code"] for _path, _status, body in answers} == {"expired_lease"}
    during = stack.ops_run(run_id)
    assert (during["state"], during["attempt"], during["result"]) == ("claimed", 2, None)

    row = stack.wait(
        lambda: (r := stack.ops_run(run_id))["state"] == "succeeded" and r,
        timeout=30,
        what="attempt 2's complete to be applied",
    )
    assert row["attempt"] == 2
    result = json.loads(row["result"])
    assert result["repository_transaction"]["transaction_id"] == f"rtx-{run_id}.2"
    assert landing_branches(repository)[f"rein/{run_id}/2"] == result["head_after"]

    stack.wait(
        lambda: not outbox(first_config.state_dir).pending,
        timeout=30,
        what="worker A to settle its refused close",
    )
    second.stop()
    first.stop()
    # B: its close applied, nothing pending or quarantined
    b = outbox(second_config.state_dir)
    assert b.pending == [] and b.quarantined == []
    assert [(e["transaction_id"], e["disposition"]) for e in b.delivered] == [
        (f"rtx-{run_id}.2", "applied")
    ]
    assert b.delivered[0]["intent_digest"] == row["close_intent_digest"]
    # A: the stale close was refused conclusively (expired_lease) and set apart with its
    # reason for an operator, as the outbox spec says; never delivered, never pending
    a = outbox(first_config.state_dir)
    assert a.pending == [] and a.delivered == []
    reasons = [
        json.loads((first_config.state_dir / "close-outbox" / "quarantine" / name).read_text())
        for name in a.quarantined
        if name.endswith(".reason.json")
    ]
    assert len(reasons) == 1 and "expired_lease" in json.dumps(reasons[0]), reasons
    assert approaches([first, second]) == [(run_id, 1), (run_id, 2)]
