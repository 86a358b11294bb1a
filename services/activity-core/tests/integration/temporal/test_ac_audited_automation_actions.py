"""An automation's pause, resume and fire commit with their audit entry or not at all
(issue 30, finding 3): a fault injected on the audit write (a real trigger on ops_audit,
raising disk_full, a database without room) answers 503, and nothing changed: the row,
the Temporal Schedule, the workflows. And (finding 9) an action addressed by the
automation's UUID is audited under its slug, so `?target=automation:<slug>` and the
automation's page show it; (finding 8) a resume lifts an operator's pause of a definition
that lost its schedule since, after which it fires."""

from __future__ import annotations

from typing import Any

import asyncpg

from ac_temporal_kit import AutomationApp, TemporalHarness, definition, temporal_app
from ac_testkit import REFUSE_AUDIT_AT_COMMIT, audit_refused
from ac_ui import csrf_of, post_form, session, signed_in
from activity_core.definitions.model import definition_uuid


async def pause_state(temporal: TemporalHarness, slug: str) -> tuple[Any, ...]:
    row = await temporal.pool.fetchrow(
        "SELECT paused, paused_by, pause_reason FROM activity_definitions WHERE slug = $1", slug
    )
    assert row is not None
    schedule = (await temporal.applier.handle(slug).describe()).schedule.state
    return (row["paused"], row["paused_by"], row["pause_reason"], schedule.paused, schedule.note)


async def audited(pool: asyncpg.Pool) -> list[tuple[str, str, str]]:
    rows = await pool.fetch("SELECT action, target, outcome FROM ops_audit ORDER BY id")
    return [(r["action"], r["target"], r["outcome"]) for r in rows]


def assert_unavailable(response: Any) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "unavailable"


async def test_a_pause_or_resume_whose_audit_write_fails_changes_nothing(
    temporal: TemporalHarness, scheduled: AutomationApp
) -> None:
    spec, api, operator, path = scheduled
    active = await pause_state(temporal, spec.id)
    assert active[0] is False and active[3] is False

    async with audit_refused(temporal.pool):
        refused = await api.http.post(f"{path}/pause", json={"reason": "outage"}, headers=operator)
        assert_unavailable(refused)
        assert await pause_state(temporal, spec.id) == active

    paused = await api.http.post(f"{path}/pause", json={"reason": "outage"}, headers=operator)
    assert paused.status_code == 200, paused.text
    held = await pause_state(temporal, spec.id)
    assert held[:4] == (True, "operator", "outage", True)

    async with audit_refused(temporal.pool):
        assert_unavailable(await api.http.post(f"{path}/resume", headers=operator))
        assert await pause_state(temporal, spec.id) == held

    # only the one pause that changed something is in the trail
    assert await audited(temporal.pool) == [
        ("automation.pause", f"automation:{spec.id}", "applied")
    ]


async def test_a_pause_whose_commit_fails_after_the_schedule_call_puts_the_schedule_back(
    temporal: TemporalHarness, scheduled: AutomationApp
) -> None:
    spec, api, operator, path = scheduled
    active = await pause_state(temporal, spec.id)

    # the entry is written, the Schedule paused, then COMMIT fails
    async with audit_refused(temporal.pool, REFUSE_AUDIT_AT_COMMIT):
        refused = await api.http.post(f"{path}/pause", headers=operator)
        assert_unavailable(refused)
    after = await pause_state(temporal, spec.id)
    assert after[:4] == active[:4] == (False, None, None, False)
    assert await audited(temporal.pool) == []


async def test_a_fire_whose_audit_write_fails_starts_nothing(
    temporal: TemporalHarness, manual: AutomationApp
) -> None:
    spec, api, operator, path = manual

    async with audit_refused(temporal.pool):
        assert_unavailable(await api.http.post(f"{path}/fire", json={}, headers=operator))

    # the operator retries (no key): one fire, the retry's; the failed one started nothing
    fired = await api.http.post(f"{path}/fire", json={}, headers=operator)
    assert fired.status_code == 202, fired.text
    body = fired.json()
    assert (await temporal.fired(body)).emitted_count == 1
    assert await temporal.workflow_ids() == [body["workflow_id"]]
    assert len(await temporal.ops_runs()) == 1
    assert await audited(temporal.pool) == [("fire", f"automation:{spec.id}", "applied")]


async def test_actions_addressed_by_uuid_are_audited_under_the_slug(
    temporal: TemporalHarness, app_factory: Any
) -> None:
    spec = definition(temporal.slug, cron="30 7 * * *", timezone="UTC")
    manual = definition(f"{temporal.slug}-manual", cron=None)
    await temporal.sync(spec, manual)
    api = await temporal_app(temporal, app_factory)
    operator = api.operator_headers()
    by_uuid = f"/ops/automations/{definition_uuid(spec.id)}"

    assert (await api.http.post(f"{by_uuid}/pause", headers=operator)).status_code == 200
    assert (await api.http.post(f"{by_uuid}/resume", headers=operator)).status_code == 200
    fired = await api.http.post(f"{by_uuid}/fire", json={}, headers=operator)
    assert fired.status_code == 202, fired.text
    # a refusal once the automation is known: under its slug too
    manual_uuid = f"/ops/automations/{definition_uuid(manual.id)}"
    conflict = await api.http.post(f"{manual_uuid}/pause", headers=operator)
    assert conflict.status_code == 409

    trail = await api.http.get(
        "/ops/audit", params={"target": f"automation:{spec.id}"}, headers=operator
    )
    assert trail.status_code == 200, trail.text
    assert [(e["action"], e["outcome"]) for e in reversed(trail.json()["entries"])] == [
        ("automation.pause", "applied"),
        ("automation.resume", "applied"),
        ("fire", "applied"),
    ]
    manual_trail = await api.http.get(
        "/ops/audit", params={"target": f"automation:{manual.id}"}, headers=operator
    )
    assert [(e["action"], e["code"]) for e in manual_trail.json()["entries"]] == [
        ("automation.pause", "state_conflict")
    ]
    # nothing under the UUID
    assert all(
        not target.endswith(str(definition_uuid(spec.id)))
        for _, target, _ in (await audited(temporal.pool))
    )


async def test_a_resume_lifts_a_pause_whose_definition_lost_its_schedule(
    temporal: TemporalHarness, scheduled: AutomationApp
) -> None:
    _, api, operator, path = scheduled
    assert (await api.http.post(f"{path}/pause", headers=operator)).status_code == 200

    await temporal.sync(definition(temporal.slug, cron=None))  # the schedule dropped
    assert (await api.http.post(f"{path}/fire", json={}, headers=operator)).status_code == 409

    resumed = await api.http.post(f"{path}/resume", headers=operator)
    assert resumed.status_code == 200, resumed.text
    view = resumed.json()
    assert (view["paused"], view["paused_by"], view["cron"], view["schedule"]) == (
        False,
        None,
        None,
        None,
    )
    again = await api.http.post(f"{path}/resume", headers=operator)
    assert again.status_code == 409  # no pause left to lift: manual only, as before
    assert again.json()["code"] == "state_conflict"

    fired = await api.http.post(f"{path}/fire", json={}, headers=operator)
    assert fired.status_code == 202, fired.text
    body = fired.json()
    await temporal.result(temporal.client.get_workflow_handle(body["workflow_id"]))
    assert len(await temporal.ops_runs()) == 1
    assert [(a, o) for a, _, o in await audited(temporal.pool) if a != "fire"] == [
        ("automation.pause", "applied"),
        ("automation.resume", "applied"),
        ("automation.resume", "refused"),
    ]


async def test_the_ui_forms_audit_under_the_slug_fail_whole_and_resume_without_a_schedule(
    temporal: TemporalHarness, scheduled: AutomationApp
) -> None:
    spec, api, _, _ = scheduled
    cookie = await signed_in(api.http)
    page_path = f"/ops/ui/automations/{spec.id}"
    by_uuid = f"/ops/ui/automations/{definition_uuid(spec.id)}"
    csrf = await csrf_of(api.http, cookie, page_path)
    active = await pause_state(temporal, spec.id)

    async with audit_refused(temporal.pool):
        refused = await post_form(api.http, f"{by_uuid}/pause", {"csrf_token": csrf}, cookie)
        assert refused.status_code == 503, refused.text
        assert await pause_state(temporal, spec.id) == active

    paused = await post_form(api.http, f"{by_uuid}/pause", {"csrf_token": csrf}, cookie)
    assert paused.status_code == 303, paused.text
    page = await api.http.get(page_path, headers=session(cookie))
    assert page.status_code == 200
    assert "automation.pause" in page.text  # the page's trail: addressed by UUID, under the slug

    await temporal.sync(definition(temporal.slug, cron=None))  # the schedule dropped
    page = await api.http.get(page_path, headers=session(cookie))
    assert 'data-action="resume"' in page.text
    resumed = await post_form(api.http, f"{page_path}/resume", {"csrf_token": csrf}, cookie)
    assert resumed.status_code == 303, resumed.text
    row = await temporal.pool.fetchrow(
        "SELECT paused, paused_by FROM activity_definitions WHERE slug = $1", spec.id
    )
    assert row is not None and (row["paused"], row["paused_by"]) == (False, None)
    page = await api.http.get(page_path, headers=session(cookie))
    assert 'data-action="resume"' not in page.text and 'data-action="pause"' not in page.text
    assert [
        (a, t, o) for a, t, o in await audited(temporal.pool) if a.startswith("automation.")
    ] == [
        ("automation.pause", f"automation:{spec.id}", "applied"),
        ("automation.resume", f"automation:{spec.id}", "applied"),
    ]
