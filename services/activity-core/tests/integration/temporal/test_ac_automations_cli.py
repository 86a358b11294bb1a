"""`activity-core automations` against a real `activity-core serve` process and the real
Temporal dev server: list, show, pause, resume and fire, tables and JSON, exit codes."""

from __future__ import annotations

from ac_serve import Done, operator_cli
from ac_temporal_kit import TemporalHarness, definition
from ac_testkit import OPERATOR_TOKEN, WORKER_TOKEN
from activity_core.cli_automations import main
from activity_core.temporal.dev_server import free_port


async def automations(url: str | None, *argv: str, token: str | None = OPERATOR_TOKEN) -> Done:
    return await operator_cli(main, url, *argv, token=token)


async def test_list_pause_resume_and_fire(temporal: TemporalHarness, served: str) -> None:
    scheduled = definition(temporal.slug, cron="0 6 * * *", timezone="UTC")
    manual = definition(f"{temporal.slug}-m", cron=None)
    await temporal.sync(scheduled, manual)

    listed = await automations(served, "list")
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split()[:4] == ["SLUG", "STATE", "SCHEDULE", "NEXT"]
    [row] = [line for line in lines if line.startswith(scheduled.id + " ")]
    assert "active" in row and "06:00:00" in row

    paused = await automations(served, "pause", scheduled.id, "--reason", "maintenance")
    assert paused.code == 0, paused.err
    assert "paused by operator" in paused.out
    assert "maintenance" in paused.out
    assert "next fires  none" in paused.out
    again = await automations(served, "pause", scheduled.id, "--json")
    assert again.code == 0
    assert again.json()["paused_by"] == "operator"
    assert again.json()["reason"] == "maintenance"
    assert again.json()["next_fire_times"] == []
    shown = await automations(served, "list", "--json")
    assert shown.code == 0
    [entry] = [a for a in shown.json()["automations"] if a["slug"] == scheduled.id]
    assert entry["paused"] is True

    refused_fire = await automations(served, "fire", scheduled.id)
    assert refused_fire.code == 1
    assert "state_conflict" in refused_fire.err

    resumed = await automations(served, "resume", scheduled.id, "--json")
    assert resumed.code == 0, resumed.err
    assert resumed.json()["paused"] is False
    assert resumed.json()["next_fire_times"]

    fired = await automations(served, "fire", manual.id, "--correlation-id", "c-1", "--json")
    assert fired.code == 0, fired.err
    assert fired.json()["trigger_key"].startswith("manual:")

    # refusals and their exit codes
    assert (await automations(served, "pause", manual.id)).code == 1
    assert (await automations(served, "resume", "no-such-thing")).code == 1
    assert (await automations(served, "pause", scheduled.id, token=WORKER_TOKEN)).code == 4
    assert (await automations(served, "pause", scheduled.id, token=None)).code == 2
    assert (await automations(served, "pause")).code == 2
    assert (await automations(served, "fire", manual.id, "--param", "novalue")).code == 2
    assert (await automations(f"http://127.0.0.1:{free_port()}", "list")).code == 3
