"""complete / fail: dispositions, refusal order, reconciliation, normalization."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from ac_testkit import WORKER_ID, AppClient, SeededQueue, refusal_of
from ops_testsupport.factories import gateway_result

OTHER_WORKER = "rein-aharness@other02"
OTHER_TOKEN = "other-token-0123456789abcdef"

GLAS_RESULT = gateway_result(path="briefs/2026-12-03.md")


async def claimed(api: AppClient, seeded: SeededQueue, **run: Any) -> uuid.UUID:
    run_id = await seeded.run(**run)
    [claimed_run] = (await api.claim()).json()["runs"]
    assert claimed_run["id"] == str(run_id)
    return run_id


async def test_complete_applies_and_stores_only_the_evidence_envelope(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await claimed(api, seeded)
    response = await api.complete(run_id, GLAS_RESULT)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["close_disposition"] == "applied"
    assert body["state"] == "succeeded"
    assert body["lease_until"] is None
    row = await seeded.row(run_id)
    stored = row["result"]
    assert "tool_output" not in stored
    assert "evidence" not in stored
    evidence = stored["execution_evidence"]
    assert evidence["tool_events_count"] == 0
    assert evidence["tool_events_completeness"] == "unavailable"
    assert evidence["tokens_spent"] == 321
    assert stored["path"] == "briefs/2026-12-03.md"
    assert row["close_intent_digest"] is not None
    assert body["result"] == stored


async def test_lost_complete_response_is_reconciled_without_a_second_write(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await claimed(api, seeded)
    first = await api.complete(run_id, GLAS_RESULT)
    assert first.json()["close_disposition"] == "applied"
    before = await seeded.row(run_id)
    # the worker never saw `first`; its outbox replays the same intent
    again = await api.complete(run_id, GLAS_RESULT)
    assert again.status_code == 200
    assert again.json()["close_disposition"] == "reconciled"
    after = await seeded.row(run_id)
    assert dict(after) == dict(before)


async def test_a_repeat_that_differs_only_in_dropped_fields_still_reconciles(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await claimed(api, seeded)
    await api.complete(run_id, GLAS_RESULT)
    noisy = {**GLAS_RESULT, "tool_output": "another transcript", "prompt": "secret"}
    response = await api.complete(run_id, noisy)
    assert response.json()["close_disposition"] == "reconciled"


async def test_a_different_terminal_intent_is_terminal_conflict(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await claimed(api, seeded)
    await api.complete(run_id, GLAS_RESULT)
    different = {**GLAS_RESULT, "path": "briefs/other.md"}
    response = await api.complete(run_id, different)
    refusal_of(response, 409, "terminal_conflict")
    failing = await api.fail(run_id, error="late failure")
    refusal_of(failing, 409, "terminal_conflict")


async def test_the_same_intent_from_another_worker_is_terminal_conflict(
    app_factory: Any, seeded: SeededQueue
) -> None:
    api = await app_factory(
        ACTIVITY_CORE_WORKER_TOKEN=None,
        ACTIVITY_CORE_WORKER_ID=None,
        ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS="1",
    )
    run_id = await claimed(api, seeded)
    await api.complete(run_id, GLAS_RESULT)
    response = await api.complete(run_id, GLAS_RESULT, worker_id=OTHER_WORKER)
    refusal_of(response, 409, "terminal_conflict")


async def test_pre_migration_terminal_rows_fail_closed(api: AppClient, seeded: SeededQueue) -> None:
    run_id = await seeded.run(
        state="succeeded", claim_owner=WORKER_ID, attempt=1, result={"ok": True}
    )
    response = await api.complete(run_id, {"ok": True})
    refusal_of(response, 409, "terminal_conflict")


async def test_missing_run_is_not_found(api: AppClient) -> None:
    response = await api.complete(uuid.uuid4(), {"ok": True})
    refusal_of(response, 404, "not_found")
    response = await api.fail(uuid.uuid4(), error="x")
    assert response.json()["code"] == "not_found"


async def test_closing_an_open_run_is_state_conflict(api: AppClient, seeded: SeededQueue) -> None:
    run_id = await seeded.run()
    response = await api.complete(run_id, {"ok": True})
    refusal_of(response, 409, "state_conflict")
    assert (await seeded.row(run_id))["state"] == "open"


async def test_closing_another_workers_claim_is_wrong_owner(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.claimed(timedelta(minutes=5), owner=OTHER_WORKER)
    response = await api.complete(run_id, {"ok": True})
    refusal_of(response, 409, "wrong_owner")
    assert (await seeded.row(run_id))["claim_owner"] == OTHER_WORKER


async def test_closing_after_the_lease_ended_is_expired_lease(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await claimed(api, seeded)
    await seeded.expire_lease(run_id)
    for response in (
        await api.complete(run_id, {"ok": True}),
        await api.fail(run_id, error="too late"),
    ):
        refusal_of(response, 409, "expired_lease")
    assert (await seeded.row(run_id))["state"] == "claimed"


async def test_fail_without_reopen_is_terminal_and_reconcilable(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await claimed(api, seeded)
    response = await api.fail(run_id, error="llm timeout")
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["close_disposition"]) == ("failed", "applied")
    assert body["last_error"] == "llm timeout"
    again = await api.fail(run_id, error="llm timeout")
    assert again.json()["close_disposition"] == "reconciled"
    other = await api.fail(run_id, error="llm timeout", reopen=True)
    assert other.json()["code"] == "terminal_conflict"


async def test_fail_with_reopen_below_the_ceiling_reopens(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await claimed(api, seeded)
    response = await api.fail(run_id, error="transient", reopen=True)
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["close_disposition"]) == ("open", "reopened")
    row = await seeded.row(run_id)
    assert row["claim_owner"] is None
    assert row["lease_until"] is None
    assert row["close_intent_digest"] is None
    # a repeat is not a terminal reconciliation
    repeat = await api.fail(run_id, error="transient", reopen=True)
    refusal_of(repeat, 409, "state_conflict")
    # and the run is claimable again, as attempt 2
    [again] = (await api.claim()).json()["runs"]
    assert again["attempt"] == 2


async def test_three_reopened_failures_end_failed_at_the_ceiling(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run()
    dispositions = []
    for _ in range(3):
        [run] = (await api.claim()).json()["runs"]
        assert run["id"] == str(run_id)
        response = await api.fail(run_id, error="flaky", reopen=True)
        dispositions.append((response.json()["state"], response.json()["close_disposition"]))
    assert dispositions == [("open", "reopened"), ("open", "reopened"), ("failed", "applied")]
    assert (await api.claim()).json()["runs"] == []
    repeat = await api.fail(run_id, error="flaky", reopen=True)
    assert repeat.json()["close_disposition"] == "reconciled"


async def test_read_projections_renormalize_historic_results(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run(
        state="succeeded",
        claim_owner=WORKER_ID,
        attempt=1,
        result={
            "ok": True,
            "tool_output": "legacy transcript",
            "api_key": "sk-123",
            "execution_evidence": {"outcome": "succeeded", "prompt": "p"},
        },
    )
    response = await api.http.get(f"/ops-runs/{run_id}", headers=api.operator_headers())
    assert response.status_code == 200
    assert response.json()["result"] == {"ok": True, "execution_evidence": {"outcome": "succeeded"}}


async def test_read_projections_sanitize_a_historic_last_error(
    api: AppClient, seeded: SeededQueue
) -> None:
    # Stored before errors were sanitized on the way in (or written by hand): control
    # characters, an ANSI escape, a bidi override and a line break. Every projection
    # answers it as the function that bounds it on the way in would have stored it.
    from ops_evidence import sanitize_error

    raw = "\x1b[31mllm timeout\x1b[0m\nretry\u202e later\x07\x7f\x9b"
    run_id = await seeded.run()
    await seeded.conn.execute("UPDATE ops_runs SET last_error = $2 WHERE id = $1", run_id, raw)
    expected = sanitize_error(raw)
    assert expected != raw and "\x1b" not in expected and "\n" not in expected

    listed = await api.http.get("/ops-runs", headers=api.operator_headers())
    assert [r["last_error"] for r in listed.json()["runs"]] == [expected]
    [claimed_run] = (await api.claim()).json()["runs"]
    assert claimed_run["last_error"] == expected
    beat = await api.heartbeat(run_id)
    assert beat.json()["last_error"] == expected
    one = await api.http.get(f"/ops-runs/{run_id}", headers=api.operator_headers())
    assert one.json()["last_error"] == expected
    assert (await seeded.row(run_id))["last_error"] == raw  # the row itself is left as it is

    # a close answer: the reconciled repeat of a historic failure answers its row
    from ops_contracts import CloseAction, CloseIntent, close_intent_digest

    intent = CloseIntent(action=CloseAction.fail, worker_id=WORKER_ID, error="llm timeout")
    failed = await seeded.run(
        state="failed",
        claim_owner=WORKER_ID,
        attempt=1,
        last_error=raw,
        close_intent_digest=close_intent_digest(intent),
    )
    repeat = await api.fail(failed, error="llm timeout")
    assert repeat.json()["close_disposition"] == "reconciled"
    assert repeat.json()["last_error"] == expected
