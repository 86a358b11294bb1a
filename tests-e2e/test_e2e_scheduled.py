"""A scheduled fire, end to end: Temporal's schedule fires, the Temporal worker emits an
ops run (and dual-writes State Hub), a worker claims it through serve replica 1, writes
the brief in a worktree inside the grant, lands it, and closes through its outbox; the
completion carries grant evidence that activity-core checked; replica 2's ops UI shows
the run with its artefact link."""

from __future__ import annotations

import html
import json

from activity_core.changes.anchors import change_anchor
from e2e_kit.git import commits_on, landing_branches, show
from e2e_kit.stack import Stack, outbox
from ops_contracts import acceptance_policy_id, grant_id, parse_repository_grant
from ops_demo.repository import git

SLUG = "e2e-scheduled"


def test_a_scheduled_fire_flows_to_a_completed_run_with_its_artefact_in_the_ui(
    stack: Stack,
) -> None:
    repository = stack.repositories / "e2e" / "scheduled"
    baseline = git(repository, "rev-parse", "HEAD")
    config = stack.worker_config("e2e-scheduled")
    stack.worker(config, [SLUG])

    stack.trigger_schedule(SLUG)

    fire = stack.wait(
        lambda: next((f for f in stack.fires(SLUG) if f["status"] == "emitted"), None),
        timeout=30,
        what="the scheduled fire to be emitted",
    )
    assert fire["trigger_key"] == "scheduled"
    assert fire["scheduled_for"] is not None
    assert fire["triggering_event_id"].startswith("scheduled:")
    row = stack.wait(
        lambda: next((r for r in stack.ops_runs(SLUG) if r["state"] == "succeeded"), None),
        timeout=30,
        what="the scheduled run to succeed",
    )
    run_id = str(row["id"])

    # the database: one run, claimed once by our worker, completed with grant evidence
    assert len(stack.ops_runs(SLUG)) == 1
    assert row["triggering_event_id"] == fire["triggering_event_id"]
    assert (row["attempt"], row["claim_owner"], row["lease_until"]) == (1, "e2e-scheduled", None)
    assert row["close_intent_digest"]
    result = json.loads(row["result"])
    grant = parse_repository_grant(json.loads(row["repository_grant"]))
    transaction = result["repository_transaction"]
    assert transaction["grant_id"] == grant_id(grant)
    assert transaction["acceptance_policy_id"] == acceptance_policy_id(grant)
    assert transaction["acceptance"] == "accepted"
    assert transaction["transaction_id"] == f"rtx-{run_id}.1"
    path, head = result["path"], result["head_after"]
    assert path.startswith("briefs/") and path.endswith(".md")
    assert transaction["accepted_paths"] == [path]
    assert transaction["accepted_commits"] == [head]
    assert result["execution_evidence"]["profile_ref"] == "harness.agent-dev@1.0.0"
    # the brief's git ran in the worker's bubblewrap sandbox, and the evidence says so
    assert result["execution_evidence"]["sandbox_profile"] == "profile.bwrap-local"

    # the repository: one commit on the run's landing branch; main untouched
    branch = f"rein/{run_id}/1"
    assert landing_branches(repository) == {branch: head}
    assert commits_on(repository, branch, baseline) == [head]
    assert git(repository, "rev-parse", "main") == baseline
    assert f"- Run: `{run_id}`" in show(repository, branch, path)

    # the outbox: delivered once, applied, nothing left
    box = outbox(config.state_dir)
    pending, delivered = box.for_run(run_id)
    assert pending == [] and box.quarantined == []
    assert [entry["disposition"] for entry in delivered] == ["applied"]

    # State Hub got the emission (keyed by the run's idempotency key); the event sink the
    # completion event
    progress = [r for r in stack.hub.received("/progress") if r.body.get("ops_run_id") == run_id]
    assert len(progress) == 1
    assert progress[0].headers["idempotency-key"] == row["idempotency_key"]
    events = [r.body for r in stack.hub.received("/events") if r.body["run_id"] == run_id]
    assert [(e["event"], e["close_disposition"]) for e in events] == [("e2e_scheduled", "applied")]
    assert events[0]["result"] == {"path": path, "head_after": head, "committed": True}

    # the ops UI of the other replica: the run, succeeded, with its artefact link: to the
    # file's diff on the run's own page (its changes are stored, it is not published, so
    # no Forgejo link: that commit exists only in the worker's repository)
    page = stack.ui_page(f"/ops/ui/automations/{SLUG}/runs/{fire['run_id']}", replica=1)
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert f'href="/ops/ui/runs/{run_id}#{change_anchor(path)}"' in text
    assert "/src/commit/" not in text
    assert f'id="ops-run-{run_id}"' in text
    assert 'data-field="state">succeeded<' in text
    assert 'data-field="claim_owner"><code class="wrap">e2e-scheduled</code>' in text
