"""A manual fire with an `Idempotency-Key` fires once (issue 30, finding 1), against the real
Temporal dev server: the same key again (in turn, at once, after a 503 from a failed audit
write, after a lost answer) starts no second workflow and emits no second set of runs, and
is answered as the first time; another key is another fire; a bad key is 422."""

from __future__ import annotations

import asyncio
import urllib.parse

from ac_serve import operator_cli
from ac_temporal_kit import AutomationApp, TemporalHarness
from ac_testkit import OPERATOR_TOKEN, REFUSE_AUDIT_AT_COMMIT, audit_refused
from activity_core.cli_automations import main
from activity_core.definitions.model import definition_uuid


async def fire_audit(temporal: TemporalHarness) -> list[tuple[str, str | None]]:
    rows = await temporal.pool.fetch(
        "SELECT outcome, details ->> 'idempotency_key' AS key FROM ops_audit "
        "WHERE action = 'fire' ORDER BY id"
    )
    return [(r["outcome"], r["key"]) for r in rows]


async def test_the_same_key_fires_once_and_is_answered_as_the_first_time(
    temporal: TemporalHarness, manual: AutomationApp
) -> None:
    spec, api, operator, path = manual
    path = f"{path}/fire"
    keyed = {**operator, "Idempotency-Key": "INC-1234:first"}

    first = await api.http.post(path, json={"correlation_id": "c-1"}, headers=keyed)
    assert first.status_code == 202, first.text
    assert first.json()["trigger_key"].startswith("manual:key:")
    assert (await temporal.fired(first.json())).emitted_count == 1
    # again once the first fire closed, and by the automation's UUID: the same answer
    again = await api.http.post(
        f"/ops/automations/{definition_uuid(spec.id)}/fire",
        json={"correlation_id": "c-1"},
        headers=keyed,
    )
    assert again.status_code == 202, again.text
    assert again.json() == first.json()

    # two at once with another key: one fire, both answered with it
    both = {**operator, "Idempotency-Key": "INC-1234:second"}
    one, two = await asyncio.gather(
        api.http.post(path, json={"correlation_id": "c-2"}, headers=both),
        api.http.post(path, json={"correlation_id": "c-2"}, headers=both),
    )
    assert (one.status_code, two.status_code) == (202, 202), (one.text, two.text)
    assert one.json() == two.json() != first.json()
    await temporal.fired(one.json())

    assert await temporal.workflow_ids() == sorted(
        [first.json()["workflow_id"], one.json()["workflow_id"]]
    )
    assert sorted(r["execution_refs"]["correlation_id"] for r in await temporal.ops_runs()) == [
        "c-1",
        "c-2",
    ]
    assert await fire_audit(temporal) == [
        ("applied", "INC-1234:first"),
        ("repeated", "INC-1234:first"),
        ("applied", "INC-1234:second"),
        ("repeated", "INC-1234:second"),
    ]


async def test_a_retry_after_a_failed_audit_write_fires_once(
    temporal: TemporalHarness, manual: AutomationApp
) -> None:
    _, api, operator, path = manual
    path = f"{path}/fire"
    keyed = {**operator, "Idempotency-Key": "retry-after-503"}

    async with audit_refused(temporal.pool):
        refused = await api.http.post(path, json={}, headers=keyed)
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "unavailable"

    retried = await api.http.post(path, json={}, headers=keyed)
    assert retried.status_code == 202, retried.text
    await temporal.fired(retried.json())
    assert await temporal.workflow_ids() == [retried.json()["workflow_id"]]
    assert len(await temporal.ops_runs()) == 1
    assert await fire_audit(temporal) == [("applied", "retry-after-503")]


async def test_a_fire_whose_audit_commit_fails_after_the_start_answers_the_start(
    temporal: TemporalHarness, manual: AutomationApp
) -> None:
    """Never 503 "retry" once the workflow started: a keyless retry would fire again."""
    _, api, operator, path = manual

    async with audit_refused(temporal.pool, REFUSE_AUDIT_AT_COMMIT):
        started = await api.http.post(f"{path}/fire", json={}, headers=operator)
    assert started.status_code == 202, started.text
    await temporal.fired(started.json())
    assert await temporal.workflow_ids() == [started.json()["workflow_id"]]
    assert len(await temporal.ops_runs()) == 1
    assert await fire_audit(temporal) == []  # lost with the commit (and logged)


async def test_a_lost_answer_retried_with_the_key_fires_once(
    temporal: TemporalHarness, served: str
) -> None:
    spec = await temporal.define(cron=None)
    key = "lost-answer-1"
    url = urllib.parse.urlsplit(served)
    assert url.hostname is not None and url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        (
            f"POST /ops/automations/{spec.id}/fire HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Authorization: Bearer {OPERATOR_TOKEN}\r\nIdempotency-Key: {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        ).encode()
    )
    await writer.drain()
    # the fire started; its answer is never read: the connection drops
    deadline = asyncio.get_running_loop().time() + 20
    while not await temporal.workflow_ids():
        assert asyncio.get_running_loop().time() < deadline, "the first fire never started"
        await asyncio.sleep(0.1)
    writer.close()
    del reader

    retried = await operator_cli(main, served, "fire", spec.id, "--idempotency-key", key, "--json")
    assert retried.code == 0, retried.err
    await temporal.fired(retried.json())
    assert await temporal.workflow_ids() == [retried.json()["workflow_id"]]
    assert len(await temporal.ops_runs()) == 1


async def test_a_repeat_after_a_pause_is_answered_and_a_new_key_is_refused(
    temporal: TemporalHarness, scheduled: AutomationApp
) -> None:
    _, api, operator, path = scheduled
    keyed = {**operator, "Idempotency-Key": "before-the-pause"}
    first = await api.http.post(f"{path}/fire", json={}, headers=keyed)
    assert first.status_code == 202, first.text
    await temporal.fired(first.json())
    assert (await api.http.post(f"{path}/pause", headers=operator)).status_code == 200

    again = await api.http.post(f"{path}/fire", json={}, headers=keyed)
    assert again.status_code == 202, again.text
    assert again.json() == first.json()
    other = {**operator, "Idempotency-Key": "after-the-pause"}
    refused = await api.http.post(f"{path}/fire", json={}, headers=other)
    assert refused.status_code == 409
    assert refused.json()["code"] == "state_conflict"
    assert await temporal.workflow_ids() == [first.json()["workflow_id"]]


async def test_a_bad_idempotency_key_is_refused_and_fires_nothing(
    temporal: TemporalHarness, manual: AutomationApp
) -> None:
    _, api, operator, path = manual
    path = f"{path}/fire"
    bearer = (b"Authorization", f"Bearer {OPERATOR_TOKEN}".encode())
    for bad in ("", "x" * 129, "has space", "slash/in", "semi;colon", "caf\u00e9"):
        headers = [bearer, (b"Idempotency-Key", bad.encode())]  # as bytes: é is not ASCII
        response = await api.http.post(path, json={}, headers=headers)
        assert response.status_code == 422, (bad, response.text)
        body = response.json()
        assert body["code"] == "invalid_request", bad
        assert body["detail"]
    documented = api.app.openapi()["paths"]["/ops/automations/{automation_id}/fire"]["post"]
    assert [p["name"] for p in documented["parameters"] if p["in"] == "header"] == [
        "Idempotency-Key"
    ]
    longest = {**operator, "Idempotency-Key": "k" * 128}
    accepted = await api.http.post(path, json={}, headers=longest)
    assert accepted.status_code == 202, accepted.text
    await temporal.fired(accepted.json())
    assert await temporal.workflow_ids() == [accepted.json()["workflow_id"]]
