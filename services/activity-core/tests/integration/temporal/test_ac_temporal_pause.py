"""An operator's pause and resume of an automation, against the real Temporal dev server:
the database row and the Temporal Schedule agree after every step; a later sync keeps the
pause (a changed cron is applied to the paused schedule); a pause racing a sync ends
paused; and the endpoint's refusals, each with the documented body."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import asyncpg

from ac_temporal_kit import TemporalHarness, automation_app, definition, temporal_app
from activity_core.definitions.model import definition_uuid
from activity_core.temporal.dev_server import free_port
from activity_core.temporal.schedules import NOTE_PAUSED


async def row(temporal: TemporalHarness, slug: str) -> asyncpg.Record:
    found = await temporal.pool.fetchrow(
        "SELECT paused, paused_by, paused_at, pause_reason, schedule_cron "
        "FROM activity_definitions WHERE slug = $1",
        slug,
    )
    assert found is not None
    return found


async def schedule_paused(temporal: TemporalHarness, slug: str) -> tuple[bool, str | None]:
    state = (await temporal.applier.handle(slug).describe()).schedule.state
    return state.paused, state.note


async def audit(temporal: TemporalHarness) -> list[tuple[str, str, str, str | None]]:
    rows = await temporal.pool.fetch(
        "SELECT action, target, outcome, code FROM ops_audit "
        "WHERE action LIKE 'automation.%' ORDER BY id"
    )
    return [(r["action"], r["target"], r["outcome"], r["code"]) for r in rows]


async def test_pause_and_resume_keep_the_database_and_the_schedule_in_agreement(
    temporal: TemporalHarness, app_factory: Any
) -> None:
    spec, api, operator, path = await automation_app(
        temporal, app_factory, cron="30 7 * * *", timezone="UTC"
    )

    active = await api.http.get(path, headers=operator)
    assert active.status_code == 200, active.text
    assert active.json()["paused"] is False
    assert active.json()["schedule"] == "active"
    assert len(active.json()["next_fire_times"]) >= 1

    paused = await api.http.post(
        f"{path}/pause",
        json={"reason": "vendor outage\nuntil Monday\u202e"},
        headers={**operator, "X-Request-Id": "req-pause-1"},
    )
    assert paused.status_code == 200, paused.text
    assert paused.headers["X-Request-Id"] == "req-pause-1"
    body = paused.json()
    assert body["id"] == str(definition_uuid(spec.id))
    assert body["slug"] == spec.id
    assert body["title"] == spec.title
    assert body["paused"] is True
    assert body["paused_by"] == "operator"
    assert body["paused_at"] is not None
    # sanitized: one line, no bidi override
    assert body["reason"] == "vendor outage until Monday"
    assert body["paused_by_definition"] is False
    assert body["schedule"] == "paused"
    assert body["next_fire_times"] == []

    stored = await row(temporal, spec.id)
    assert stored["paused"] is True
    assert stored["paused_by"] == "operator"
    assert stored["pause_reason"] == "vendor outage until Monday"
    is_paused, note = await schedule_paused(temporal, spec.id)
    assert is_paused
    assert note == "activity-core: paused by operator operator: vendor outage until Monday"

    # the same pause again: 200, unchanged (the first pause's time and reason)
    again = await api.http.post(
        f"/ops/automations/{definition_uuid(spec.id)}/pause",
        json={"reason": "another reason"},
        headers=operator,
    )
    assert again.status_code == 200, again.text
    assert again.json() == body

    # a paused automation does not fire, manually either
    fire = await api.http.post(f"{path}/fire", json={}, headers=operator)
    assert fire.status_code == 409
    assert fire.json()["code"] == "state_conflict"

    # the read shows the same
    seen = await api.http.get(path, headers=operator)
    assert seen.status_code == 200
    assert seen.json() == body
    listed = await api.http.get("/ops/automations", headers=operator)
    [summary] = [a for a in listed.json()["automations"] if a["slug"] == spec.id]
    assert summary["paused"] is True

    resumed = await api.http.post(f"{path}/resume", headers=operator)
    assert resumed.status_code == 200, resumed.text
    after = resumed.json()
    assert after["paused"] is False
    assert after["paused_by"] is None and after["paused_at"] is None and after["reason"] is None
    assert after["schedule"] == "active"
    fires = [datetime.fromisoformat(t) for t in after["next_fire_times"]]
    assert fires and all(f > datetime.now(UTC) for f in fires)
    assert all((f.astimezone(UTC).hour, f.minute) == (7, 30) for f in fires)
    stored = await row(temporal, spec.id)
    assert (stored["paused"], stored["paused_by"], stored["paused_at"]) == (False, None, None)
    assert (await schedule_paused(temporal, spec.id))[0] is False

    repeat = await api.http.post(f"{path}/resume", headers=operator)
    assert repeat.status_code == 200
    assert repeat.json() == after

    target = f"automation:{spec.id}"
    assert await audit(temporal) == [
        ("automation.pause", target, "applied", None),
        # addressed by its UUID, audited under its slug (the page's and the filter's)
        ("automation.pause", target, "repeated", None),
        ("automation.resume", target, "applied", None),
        ("automation.resume", target, "repeated", None),
    ]


async def test_a_sync_keeps_an_operators_pause_and_a_resume_follows_the_new_cron(
    temporal: TemporalHarness, app_factory: Any
) -> None:
    spec, api, operator, path = await automation_app(
        temporal, app_factory, cron="0 6 * * *", timezone="UTC"
    )
    paused = await api.http.post(f"{path}/pause", headers=operator)
    assert paused.status_code == 200, paused.text
    assert paused.json()["reason"] is None

    moved = definition(temporal.slug, cron="45 9 * * *", timezone="UTC")
    await temporal.sync(moved)
    assert temporal.applier.last_report is not None
    assert temporal.applier.last_report.updated == [spec.id]
    # a sync of the same files again leaves it alone, still paused
    await temporal.sync(moved)
    assert temporal.applier.last_report.unchanged == [spec.id]

    stored = await row(temporal, spec.id)
    assert stored["paused"] is True
    assert stored["paused_by"] == "operator"
    assert stored["schedule_cron"] == "45 9 * * *"
    described = await temporal.applier.handle(spec.id).describe()
    assert described.schedule.state.paused
    # the operator's note survives the sync
    assert described.schedule.state.note == "activity-core: paused by operator operator"
    [calendar] = described.schedule.spec.calendars
    assert calendar.hour[0].start == 9 and calendar.minute[0].start == 45
    seen = (await api.http.get(path, headers=operator)).json()
    assert seen["paused"] is True and seen["schedule"] == "paused"
    assert seen["cron"] == "45 9 * * *"
    assert seen["next_fire_times"] == []

    resumed = await api.http.post(f"{path}/resume", headers=operator)
    assert resumed.status_code == 200, resumed.text
    fires = [datetime.fromisoformat(t) for t in resumed.json()["next_fire_times"]]
    assert fires
    assert all((f.astimezone(UTC).hour, f.minute) == (9, 45) for f in fires)
    # and a sync after the resume leaves it active
    await temporal.sync(moved)
    assert (await schedule_paused(temporal, spec.id))[0] is False
    assert (await row(temporal, spec.id))["paused"] is False


async def test_a_pause_racing_a_sync_ends_paused_in_both(
    temporal: TemporalHarness, app_factory: Any
) -> None:
    api = await temporal_app(temporal, app_factory)
    operator = api.operator_headers()
    for n in range(6):
        slug = f"{temporal.slug}-{n}"
        await temporal.sync(definition(slug, cron="0 6 * * *", timezone="UTC"))
        changed = definition(slug, cron=f"{n} 8 * * *", timezone="UTC")
        # the sync first, the pause first, and everything in between
        delay = 0.01 * n
        pause_call = api.http.post(f"/ops/automations/{slug}/pause", headers=operator)

        async def sync_later(spec: Any = changed, wait: float = delay) -> None:
            await asyncio.sleep(wait)
            await temporal.sync(spec)

        paused, _ = await asyncio.gather(pause_call, sync_later())
        assert paused.status_code == 200, paused.text
        stored = await row(temporal, slug)
        assert stored["paused"] is True and stored["paused_by"] == "operator"
        assert stored["schedule_cron"] == f"{n} 8 * * *"
        assert (await schedule_paused(temporal, slug))[0] is True, n
        seen = (await api.http.get(f"/ops/automations/{slug}", headers=operator)).json()
        assert seen["schedule"] == "paused" and seen["next_fire_times"] == []


async def test_pause_and_resume_refusals(temporal: TemporalHarness, app_factory: Any) -> None:
    scheduled = definition(temporal.slug, cron="0 6 * * *")
    manual = definition(f"{temporal.slug}-manual", cron=None)
    by_file = definition(f"{temporal.slug}-file", cron="0 6 * * *", paused=True)
    await temporal.sync(scheduled, manual, by_file)
    api = await temporal_app(temporal, app_factory)
    operator = api.operator_headers()

    for verb in ("pause", "resume"):
        unknown = await api.http.post(f"/ops/automations/no-such-thing/{verb}", headers=operator)
        assert unknown.status_code == 404
        assert unknown.json() == {"code": "not_found", "detail": "no automation 'no-such-thing'"}
        no_schedule = await api.http.post(f"/ops/automations/{manual.id}/{verb}", headers=operator)
        assert no_schedule.status_code == 409
        assert no_schedule.json()["code"] == "state_conflict"
        assert "manually" in no_schedule.json()["detail"]
        assert (await api.http.post(f"/ops/automations/{scheduled.id}/{verb}")).status_code == 401
        as_worker = await api.http.post(
            f"/ops/automations/{scheduled.id}/{verb}", headers=api.worker_headers()
        )
        assert as_worker.status_code == 403
        assert as_worker.json()["code"] == "forbidden"
    unknown_read = await api.http.get("/ops/automations/no-such-thing", headers=operator)
    assert unknown_read.status_code == 404
    assert unknown_read.json()["code"] == "not_found"

    for bad in ({"reason": ""}, {"reason": "   "}, {"reason": "x" * 501}, {"other": 1}, [1]):
        response = await api.http.post(
            f"/ops/automations/{scheduled.id}/pause", json=bad, headers=operator
        )
        assert response.status_code == 422, (bad, response.text)
        assert response.json()["code"] == "invalid_request"

    # paused by its file: a resume is refused (the file is the authority), a pause is kept
    refused = await api.http.post(f"/ops/automations/{by_file.id}/resume", headers=operator)
    assert refused.status_code == 409
    assert refused.json()["code"] == "state_conflict"
    assert "definition file" in refused.json()["detail"]
    assert (await schedule_paused(temporal, by_file.id)) == (True, NOTE_PAUSED)
    held = await api.http.post(f"/ops/automations/{by_file.id}/pause", headers=operator)
    assert held.status_code == 200
    assert held.json()["paused_by"] == "operator"
    assert held.json()["paused_by_definition"] is True
    assert (await schedule_paused(temporal, by_file.id)) == (
        True,
        "activity-core: paused by operator operator",
    )
    # the file unpaused and synced: still held by the operator until a resume
    await temporal.sync(scheduled, manual, definition(by_file.id, cron="0 6 * * *"))
    assert (await schedule_paused(temporal, by_file.id))[0] is True
    assert (await row(temporal, by_file.id))["paused"] is True

    # nothing of the refusals changed a row or a schedule
    stored = await row(temporal, scheduled.id)
    assert (stored["paused"], stored["paused_by"]) == (False, None)
    assert (await schedule_paused(temporal, scheduled.id))[0] is False
    refusals = [entry for entry in await audit(temporal) if entry[2] == "refused"]
    assert ("automation.pause", "automation:no-such-thing", "refused", "not_found") in refusals
    assert (
        "automation.resume",
        f"automation:{by_file.id}",
        "refused",
        "state_conflict",
    ) in refusals


async def test_pause_answers_503_while_temporal_is_down_and_changes_nothing(
    temporal: TemporalHarness, app_factory: Any
) -> None:
    spec = await temporal.define(cron="0 6 * * *")
    api = await temporal_app(temporal, app_factory, TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    operator = api.operator_headers()

    for verb in ("pause", "resume"):
        response = await api.http.post(f"/ops/automations/{spec.id}/{verb}", headers=operator)
        assert response.status_code == 503, response.text
        assert response.json() == {
            "code": "unavailable",
            "detail": "Temporal is not reachable; retry",
        }
        assert response.headers["Retry-After"]
    stored = await row(temporal, spec.id)
    assert (stored["paused"], stored["paused_by"]) == (False, None)
    assert (await schedule_paused(temporal, spec.id))[0] is False

    # a read still answers, saying it could not ask Temporal
    seen = await api.http.get(f"/ops/automations/{spec.id}", headers=operator)
    assert seen.status_code == 200
    assert seen.json()["schedule"] == "unreachable"
    assert seen.json()["next_fire_times"] == []


async def test_the_ops_ui_shows_the_pause_and_the_next_fires(
    temporal: TemporalHarness, app_factory: Any
) -> None:
    spec, api, operator, path = await automation_app(
        temporal, app_factory, cron="15 5 * * *", timezone="UTC"
    )
    page = f"/ops/ui/automations/{spec.id}"

    active = await api.http.get(page, headers=operator)
    assert active.status_code == 200, active.text
    assert '<dd data-field="pause">active</dd>' in active.text
    resumed_fires = (await api.http.get(f"/ops/automations/{spec.id}", headers=operator)).json()
    first = datetime.fromisoformat(resumed_fires["next_fire_times"][0])
    assert f'datetime="{first.isoformat()}"' in active.text

    paused = await api.http.post(
        f"{path}/pause",
        json={"reason": "<script>alert(1)</script> & more"},
        headers=operator,
    )
    assert paused.status_code == 200
    shown = await api.http.get(page, headers=operator)
    assert shown.status_code == 200
    assert "by <code>operator</code>" in shown.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in shown.text
    assert "<script>" not in shown.text
    assert '<dd data-field="next_fires">none while paused</dd>' in shown.text
