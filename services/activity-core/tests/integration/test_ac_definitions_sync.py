"""Definition sync against real PostgreSQL: upsert, retire, atomicity, and the CLI."""

from __future__ import annotations

import asyncio
import io
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ac_definitions import RecordingApplier, definition_doc, spec_of, write_doc
from activity_core import cli, cli_definitions
from activity_core.definitions.model import definition_uuid
from activity_core.definitions.sync import ScheduleApplyError, sync_definitions
from activity_core.settings import load_settings
from ops_devsupport.processes import run_console_script

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "definitions"


async def rows(db: asyncpg.Connection) -> dict[str, asyncpg.Record]:
    return {r["slug"]: r for r in await db.fetch("SELECT * FROM activity_definitions")}


# --- sync_definitions -------------------------------------------------------------------------


async def test_sync_creates_rows_then_leaves_them_alone(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    applier = RecordingApplier()
    doc = definition_doc()
    report = await sync_definitions(pool, [spec_of(doc)], applier)
    assert (report.created, report.updated, report.unchanged) == (["fi-daily-brief"], [], [])
    stored = (await rows(db))["fi-daily-brief"]
    assert stored["id"] == definition_uuid("fi-daily-brief")
    assert stored["title"] == "FI daily brief"
    assert (stored["schedule_cron"], stored["schedule_timezone"]) == (
        "0 6 * * 1-5",
        "Europe/Berlin",
    )
    assert stored["paused"] is False
    assert stored["removed_at"] is None
    assert (
        stored["definition"]["rules"][0]["action"]["repository_grant"]
        == doc["rules"][0]["action"]["repository_grant"]
    )
    assert stored["content_digest"] == spec_of(doc).content_digest()

    again = await sync_definitions(pool, [spec_of(doc)], applier)
    assert (again.created, again.updated, again.unchanged) == ([], [], ["fi-daily-brief"])
    assert (await rows(db))["fi-daily-brief"]["updated_at"] == stored["updated_at"]
    # schedules are applied on every sync with the full set, so Temporal converges
    assert applier.calls == [(["fi-daily-brief"], []), (["fi-daily-brief"], [])]


async def test_a_changed_definition_is_updated(pool: asyncpg.Pool, db: asyncpg.Connection) -> None:
    applier = RecordingApplier()
    await sync_definitions(pool, [spec_of(definition_doc())], applier)
    changed = definition_doc(schedule={"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"})
    report = await sync_definitions(pool, [spec_of(changed)], applier)
    assert report.updated == ["fi-daily-brief"]
    stored = (await rows(db))["fi-daily-brief"]
    assert stored["schedule_cron"] == "0 7 * * 1-5"
    assert stored["content_digest"] == spec_of(changed).content_digest()
    assert applier.specs[-1][0].schedule is not None
    assert applier.specs[-1][0].schedule.cron == "0 7 * * 1-5"


async def test_a_paused_definition_is_stored_paused(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    await sync_definitions(pool, [spec_of(definition_doc(paused=True))], RecordingApplier())
    assert (await rows(db))["fi-daily-brief"]["paused"] is True


async def test_a_definition_whose_file_is_gone_is_paused_not_deleted(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    applier = RecordingApplier()
    a, b = definition_doc("alpha"), definition_doc("beta")
    await sync_definitions(pool, [spec_of(a), spec_of(b)], applier)

    report = await sync_definitions(pool, [spec_of(a)], applier)
    assert (report.unchanged, report.paused, report.removed) == (["alpha"], ["beta"], ["beta"])
    beta = (await rows(db))["beta"]
    assert beta["paused"] is True
    assert beta["removed_at"] is not None
    assert applier.calls[-1] == (["alpha"], ["beta"])

    # still gone: not paused again, but the applier keeps hearing about it
    report = await sync_definitions(pool, [spec_of(a)], applier)
    assert (report.paused, report.removed) == ([], ["beta"])
    assert (await rows(db))["beta"]["removed_at"] == beta["removed_at"]

    # the file comes back: un-retired, with its own pause state
    report = await sync_definitions(pool, [spec_of(a), spec_of(b)], applier)
    assert report.updated == ["beta"]
    back = (await rows(db))["beta"]
    assert (back["paused"], back["removed_at"]) == (False, None)
    assert applier.calls[-1] == (["alpha", "beta"], [])


async def test_a_retired_definition_with_runs_keeps_them(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    await sync_definitions(pool, [spec_of(definition_doc("alpha"))], RecordingApplier())
    await db.execute(
        """INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title,
               source_type, source_id, triggering_event_id)
           VALUES (gen_random_uuid(), $1, 'k', 'a/b', 't', 'rule', 'r', 'e')""",
        definition_uuid("alpha"),
    )
    await sync_definitions(pool, [spec_of(definition_doc("beta"))], RecordingApplier())
    assert await db.fetchval("SELECT count(*) FROM ops_runs") == 1
    assert (await rows(db))["alpha"]["paused"] is True


async def test_when_schedules_fail_the_definitions_are_stored_and_a_resync_converges(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    applier = RecordingApplier(fail=RuntimeError("temporal went away"))
    with pytest.raises(ScheduleApplyError, match="temporal went away"):
        await sync_definitions(pool, [spec_of(definition_doc())], applier)
    assert "fi-daily-brief" in await rows(db)
    applier.fail = None
    report = await sync_definitions(pool, [spec_of(definition_doc())], applier)
    assert report.unchanged == ["fi-daily-brief"]
    assert applier.calls[-1] == (["fi-daily-brief"], [])


async def test_concurrent_syncs_serialize(pool: asyncpg.Pool, db: asyncpg.Connection) -> None:
    specs = [spec_of(definition_doc(f"def-{i}")) for i in range(5)]
    reports = await asyncio.gather(
        *(sync_definitions(pool, specs, RecordingApplier()) for _ in range(3))
    )
    assert sorted(len(r.created) for r in reports) == [0, 0, 5]
    assert len(await rows(db)) == 5


# --- the command ------------------------------------------------------------------------------


@contextmanager
def dsn_of(db_dsn: str) -> Any:
    yield db_dsn


def run_sync(
    db_dsn: str, applier: RecordingApplier, *paths: Path, **env: Any
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    settings = load_settings(STATE_HUB_URL=None, **env)
    original = cli_definitions.open_schedule_applier
    cli_definitions.open_schedule_applier = applier.factory
    try:
        code = cli_definitions.run_sync_definitions(
            settings, list(paths), database=lambda: dsn_of(db_dsn), out=out, err=err
        )
    finally:
        cli_definitions.open_schedule_applier = original
    return code, out.getvalue(), err.getvalue()


async def test_a_bad_second_file_changes_nothing_and_applies_no_schedule(
    db_dsn: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    write_doc(tmp_path, definition_doc("a-first"), "a.yaml")
    bad = definition_doc("b-second")
    bad["rules"][0]["action"]["repository_grant"]["allowed_paths"] = ["briefs/", "../etc"]
    bad["rules"][0]["action"]["harness_profile_ref"] = "harness.agent-dev"
    write_doc(tmp_path, bad, "b.yaml")
    applier = RecordingApplier()

    code, out, err = await asyncio.to_thread(run_sync, db_dsn, applier, tmp_path)

    assert code == 1
    lines = err.strip().splitlines()
    assert lines[:-1] == [
        f"{tmp_path / 'b.yaml'}: b-second: rules[0].action.harness_profile_ref: "
        "harness profile ref must be <id>@<version> with exactly one '@'",
        f"{tmp_path / 'b.yaml'}: b-second: rules[0].action.repository_grant.allowed_paths[1]: "
        "pattern must not contain a '.' or '..' segment",
    ]
    assert lines[-1] == "activity-core: 2 error(s) in the definitions; nothing changed"
    assert out == ""
    assert await rows(db) == {}
    assert (applier.opened, applier.calls) == (0, [])


async def test_the_command_syncs_the_examples_and_prints_a_summary(
    db_dsn: str, db: asyncpg.Connection
) -> None:
    applier = RecordingApplier()
    code, out, err = await asyncio.to_thread(run_sync, db_dsn, applier, EXAMPLES)
    assert (code, err) == (0, "")
    assert "created: fi-daily-brief" in out
    assert out.strip().endswith("definitions synced: created 3, updated 0, unchanged 0, paused 0")
    assert set(await rows(db)) == {"fi-daily-brief", "docs-maintenance", "weekly-digest"}
    [(specs, removed)] = applier.calls
    assert sorted(specs) == ["docs-maintenance", "fi-daily-brief", "weekly-digest"]
    assert removed == []

    code, out, _ = await asyncio.to_thread(run_sync, db_dsn, applier, EXAMPLES)
    assert code == 0
    assert out.strip() == (
        "activity-core: definitions synced: created 0, updated 0, unchanged 3, paused 0"
    )


async def test_the_require_profile_flag_applies_at_sync(
    db_dsn: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    doc = definition_doc()
    del doc["rules"][0]["action"]["harness_profile_ref"]
    write_doc(tmp_path, doc)
    applier = RecordingApplier()
    code, _, err = await asyncio.to_thread(
        run_sync, db_dsn, applier, tmp_path, ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE="true"
    )
    assert code == 1
    assert "rules[0].action.harness_profile_ref: required when" in err
    assert await rows(db) == {}
    code, _, _ = await asyncio.to_thread(run_sync, db_dsn, applier, tmp_path)
    assert code == 0
    assert set(await rows(db)) == {"fi-daily-brief"}


async def test_an_unreachable_scheduler_changes_nothing(
    db_dsn: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    write_doc(tmp_path, definition_doc())

    def unreachable(settings: Any) -> Any:
        raise ConnectionError("temporal at 127.0.0.1:1 is not answering")

    applier = RecordingApplier()
    applier.factory = unreachable  # type: ignore[method-assign]
    code, _, err = await asyncio.to_thread(run_sync, db_dsn, applier, tmp_path)
    assert code == 1
    assert "cannot reach the scheduler; nothing changed" in err
    assert await rows(db) == {}


async def test_the_command_is_registered(
    db_dsn: str,
    db: asyncpg.Connection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_doc(tmp_path, definition_doc())
    applier = RecordingApplier()
    monkeypatch.setenv("ACTIVITY_CORE_DATABASE_URL", db_dsn)
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)
    monkeypatch.setattr(cli_definitions, "open_schedule_applier", applier.factory)
    code = await asyncio.to_thread(cli.main, ["sync-definitions", str(tmp_path)])
    assert code == 0, capsys.readouterr()
    assert "created 1" in capsys.readouterr().out
    assert applier.calls == [(["fi-daily-brief"], [])]


def test_the_console_script_lists_every_error_and_exits_1(tmp_path: Path) -> None:
    """A real process: validation fails before any database or scheduler is needed."""
    write_doc(tmp_path, definition_doc("good"), "a.yaml")
    write_doc(tmp_path, "id: bad\ntitle: 5\nrules: [{id: r, action: {}}]\n", "b.yaml")
    write_doc(tmp_path, "id: [unclosed\n", "c.yaml")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACTIVITY_CORE_", "OPS_RUN_", "STATE_HUB_", "TEMPORAL_"))
    }
    env["ACTIVITY_CORE_DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/none"
    completed = run_console_script("activity-core", "sync-definitions", str(tmp_path), env=env)
    assert completed.returncode == 1, completed
    assert "Traceback" not in completed.stderr
    b, c = tmp_path / "b.yaml", tmp_path / "c.yaml"
    assert completed.stderr.splitlines() == [
        f"{b}: bad: title: must be a string (quote it in YAML)",
        f"{b}: bad: rules[0].action.task_template: required for a rule or instruction "
        "that emits tasks",
        f"{b}: bad: rules[0].action.target_repo: required for a rule or instruction "
        "that emits tasks",
        f"{c}: -: $: YAML error at line 2, column 1: expected ',' or ']', but got '<stream end>'",
        "activity-core: 4 error(s) in the definitions; nothing changed",
    ]
