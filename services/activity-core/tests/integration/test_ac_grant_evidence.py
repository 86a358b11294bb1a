"""evidence_conflict: a granted run closes only with evidence that matches its grant."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from ac_changes import completion, make_changes
from ac_testkit import AppClient, SeededQueue, refusal_of
from ops_contracts import acceptance_policy_id, grant_id, parse_repository_grant

GRANT = {
    "version": "1",
    "allowed_paths": ["briefs/", "README.md"],
    "commit_count": {"min": 1, "max": 2},
    "publish": False,
}
PARSED = parse_repository_grant(GRANT)
SHA_A = "a" * 40
SHA_B = "b" * 40
SHA_C = "c" * 40


def transaction(**overrides: Any) -> dict[str, Any]:
    tx: dict[str, Any] = {
        "transaction_id": "tx-1",
        "baseline_digest": "d" * 40,
        "grant_id": grant_id(PARSED),
        "acceptance_policy_id": acceptance_policy_id(PARSED),
        "acceptance": "accepted",
        "accepted_commits": [SHA_A],
        "accepted_paths": ["briefs/2026-12-03.md"],
    }
    tx.update(overrides)
    return {k: v for k, v in tx.items() if v is not None}


async def granted_claim(api: AppClient, seeded: SeededQueue) -> uuid.UUID:
    run_id = await seeded.run(repository_grant=GRANT)
    [run] = (await api.claim()).json()["runs"]
    assert run["id"] == str(run_id)
    return run_id


async def test_matching_evidence_completes(
    api: AppClient, seeded: SeededQueue, tmp_path: Path
) -> None:
    run_id = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, run_id)
    assert (await api.upload_changes(run_id, changes.bundle)).status_code == 201
    result = completion(GRANT, changes)
    result["repository_transaction"]["allowed_paths"] = ["x"]
    response = await api.complete(run_id, result)
    assert response.status_code == 200, response.text
    stored = (await seeded.row(run_id))["result"]["repository_transaction"]
    assert stored["grant_id"] == grant_id(PARSED)
    assert "allowed_paths" not in stored  # raw grant patterns never persist


@pytest.mark.parametrize(
    "repository_transaction",
    [
        None,
        transaction(grant_id="rg1-" + "0" * 64),
        transaction(acceptance_policy_id="ap1-" + "0" * 64),
        transaction(grant_id=None),
        transaction(acceptance="rejected"),
        transaction(accepted_commits=[]),
        transaction(accepted_commits=[SHA_A, SHA_B, SHA_C]),
        transaction(accepted_paths=["src/main.py"]),
        transaction(accepted_paths=["briefs/ok.md", ".git/config"]),
    ],
    ids=[
        "no-transaction",
        "wrong-grant-id",
        "wrong-policy-id",
        "missing-grant-id",
        "not-accepted",
        "too-few-commits",
        "too-many-commits",
        "path-outside",
        "git-path",
    ],
)
async def test_mismatched_completion_evidence_is_evidence_conflict(
    api: AppClient, seeded: SeededQueue, repository_transaction: dict[str, Any] | None
) -> None:
    run_id = await granted_claim(api, seeded)
    result: dict[str, Any] = {"ok": True}
    if repository_transaction is not None:
        result["repository_transaction"] = repository_transaction
    response = await api.complete(run_id, result)
    refusal_of(response, 409, "evidence_conflict")
    row = await seeded.row(run_id)
    assert row["state"] == "claimed"
    assert row["result"] is None


async def test_failure_may_omit_transaction_evidence(api: AppClient, seeded: SeededQueue) -> None:
    run_id = await granted_claim(api, seeded)
    response = await api.fail(run_id, error="setup never began")
    assert response.status_code == 200
    assert response.json()["state"] == "failed"


async def test_failure_with_mismatched_grant_evidence_is_refused(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await granted_claim(api, seeded)
    bad = {"repository_transaction": transaction(grant_id="rg1-" + "1" * 64)}
    response = await api.fail(run_id, error="rejected work", result=bad)
    refusal_of(response, 409, "evidence_conflict")
    good = {"repository_transaction": transaction(acceptance="rejected", accepted_commits=[])}
    response = await api.fail(run_id, error="rejected work", result=good)
    assert response.status_code == 200


async def test_grant_evidence_on_an_ungranted_run_is_refused(
    api: AppClient, seeded: SeededQueue
) -> None:
    await seeded.run()
    [run] = (await api.claim()).json()["runs"]
    response = await api.complete(run["id"], {"ok": True, "repository_transaction": transaction()})
    refusal_of(response, 409, "evidence_conflict")
