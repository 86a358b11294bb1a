"""No prompt, description, tool output or raw model text ever leaves through the artefact
views or the ops UI, even when a row holds it (written directly, bypassing normalization)."""

from __future__ import annotations

from typing import Any

import asyncpg

from ac_fires import SeededAutomations, at, completed_result
from ac_testkit import AppClient

MARK = "LEAK-MARKER-7c1e"

# Everything a careless executor, an old row or a hand edit could have put in `result`.
POISONED_RESULT: dict[str, Any] = completed_result(
    prompt=f"{MARK} system prompt",
    messages=[{"role": "user", "content": f"{MARK} user message"}],
    tool_output=f"{MARK} tool output",
    tool_error=f"{MARK} tool error",
    output=f"{MARK} raw model output",
    response={"text": f"{MARK} provider response"},
    text=f"{MARK} completion text",
    api_key=f"{MARK} credential",
    description=f"{MARK} description",
    artifacts=[{"path": f"{MARK}.md", "content": MARK}],
    evidence={
        "resolved_model": "claude-sonnet-4-6",
        "profile_ref": "harness.agent-dev@1.0.0",
        "prompt": f"{MARK} nested prompt",
        "raw_response": f"{MARK} nested raw",
        "refs": {"correlation_id": "c-1", "secret_ref": MARK},
    },
    repository_transaction={
        "grant_id": "g-1",
        "allowed_paths": [f"{MARK}/**"],
        "provider_payload": {"body": MARK},
    },
)
POISONED_RESULT["execution_evidence"]["system_prompt"] = f"{MARK} evidence prompt"
POISONED_RESULT["execution_evidence"]["tool_output"] = f"{MARK} evidence tool output"

OPS_RUN_KEYS = {
    "id", "title", "target_repo", "state", "disposition", "attempt", "claim_owner",
    "lease_until", "priority", "labels", "last_error", "harness_profile_ref",
    "triggering_event_id", "matched_by", "created_at", "updated_at", "execution_evidence",
    "artifacts",
}  # fmt: skip
ARTIFACT_KEYS = {"ops_run_id", "path", "head_after", "target_repo", "forgejo_url", "change_url"}
EVIDENCE_KEYS = {
    "profile_ref", "rein_id", "rein_version", "resolved_model", "sandbox_profile", "outcome"
}  # fmt: skip


async def test_nothing_but_artefacts_and_compact_evidence_leaves(
    api: AppClient, db: asyncpg.Connection
) -> None:
    seed = SeededAutomations(db)
    a = await seed.automation(
        "brief",
        "FI daily brief",
        definition={"rules": [{"action": {"description_template": f"{MARK} template"}}]},
    )
    _, fire = await seed.fire(
        a,
        started_at=at(0),
        finished_at=at(5),
        run_id="run-55556666",
        context={"request": {"goal_ref": MARK, "note": f"{MARK} request text"}},
    )
    await seed.ops_run(
        a,
        triggering_event_id="run-55556666",
        created_at=at(1),
        state="succeeded",
        attempt=1,
        claim_owner="rein-aharness@railiance01",
        description=f"{MARK} the rendered task description",
        execution_refs={"correlation_id": "c-1"},
        result=POISONED_RESULT,
    )
    # The raw row really holds the material, so the guarantee is tested, not assumed.
    raw = await db.fetchval("SELECT result::text FROM ops_runs")
    assert raw.count(MARK) >= 10

    h = api.operator_headers()
    responses = [
        await api.http.get("/ops/automations", headers=h),
        await api.http.get("/ops/automations/brief/runs", headers=h),
        await api.http.get(f"/ops/automations/brief/runs/{fire}", headers=h),
        await api.http.get("/ops/ui/", headers=h),
        await api.http.get("/ops/ui/automations/brief", headers=h),
        await api.http.get(f"/ops/ui/automations/brief/runs/{fire}", headers=h),
    ]
    for response in responses:
        assert response.status_code == 200, response.text
        assert MARK not in response.text, response.request.url

    detail = responses[2].json()["run"]
    (run,) = detail["ops_runs"]
    assert set(run) == OPS_RUN_KEYS
    assert set(run["execution_evidence"]) <= EVIDENCE_KEYS
    assert run["execution_evidence"]["resolved_model"] == "claude-sonnet-4-6"
    assert [set(art) for art in run["artifacts"]] == [ARTIFACT_KEYS]
    assert run["artifacts"][0]["path"] == "briefs/2024-05-01.md"
    assert "context" not in detail and "description" not in run and "result" not in run
