"""The `activity-core` command: migrate on a fresh database, and failures as one clear line.

A few cases run the installed console script as a real process (exit code, stderr, no
traceback); the table of bad settings runs the same entry point in-process, which stops
before logging or the database are touched.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import types
import urllib.parse
import uuid

import asyncpg
import pytest

from ac_serve import EXECUTABLE, clean_env, run_cli
from activity_core import cli
from activity_core.db.migrate import bundled_migrations, current_version

UNREACHABLE_URL = "postgresql://nobody@127.0.0.1:1/none"
PASSWORD = "pw-5e1f-never-printed"


def assert_one_line(completed: subprocess.CompletedProcess[str], code: int) -> str:
    assert completed.returncode == code, completed
    assert "Traceback" not in completed.stderr + completed.stdout
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("activity-core: ")
    return lines[0]


async def test_migrate_applies_every_migration_then_is_idempotent(empty_dsn: str) -> None:
    env = clean_env(ACTIVITY_CORE_DATABASE_URL=empty_dsn)
    versions = [m.version for m in bundled_migrations()]

    first = run_cli("migrate", env=env)
    assert first.returncode == 0, first.stderr
    assert f"migrations applied: {versions}" in first.stdout
    assert "Traceback" not in first.stderr

    second = run_cli("migrate", env=env)
    assert second.returncode == 0, second.stderr
    assert "none (schema current)" in second.stdout

    conn = await asyncpg.connect(empty_dsn)
    try:
        assert await current_version(conn) == versions[-1]
        assert await conn.fetchval("SELECT count(*) FROM schema_migrations") == len(versions)
        assert await conn.fetchval("SELECT to_regclass('ops_runs') IS NOT NULL")
    finally:
        await conn.close()


async def test_replicas_running_migrate_at_once_all_succeed(empty_dsn: str) -> None:
    env = clean_env(ACTIVITY_CORE_DATABASE_URL=empty_dsn)
    procs = [
        subprocess.Popen(
            [str(EXECUTABLE), "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
    versions = [m.version for m in bundled_migrations()]
    # exactly one of them applied the chain; the others found it current
    assert sum(f"migrations applied: {versions}" in out for out, _ in outputs) == 1, outputs
    conn = await asyncpg.connect(empty_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM schema_migrations") == len(versions)
    finally:
        await conn.close()


def test_an_unreachable_database_is_exit_1_and_one_line() -> None:
    completed = run_cli("migrate", env=clean_env(ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL))
    line = assert_one_line(completed, 1)
    assert "cannot connect to the database" in line


async def test_a_database_that_does_not_exist_is_exit_1_and_one_line(server_dsn: str) -> None:
    parts = urllib.parse.urlsplit(server_dsn)
    missing = urllib.parse.urlunsplit(parts._replace(path=f"/ac_missing_{uuid.uuid4().hex[:8]}"))
    completed = run_cli("migrate", env=clean_env(ACTIVITY_CORE_DATABASE_URL=missing))
    line = assert_one_line(completed, 1)
    assert "cannot connect to the database" in line


def test_a_bad_setting_is_exit_2_and_one_line_from_the_real_command() -> None:
    for command in ("migrate", "serve"):
        completed = run_cli(
            command,
            env=clean_env(ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL, OPS_RUN_LEASE_SECONDS="abc"),
        )
        line = assert_one_line(completed, 2)
        assert "OPS_RUN_LEASE_SECONDS" in line


# (variables, the variable the line must name)
BAD_SETTINGS: list[tuple[dict[str, str], str]] = [
    ({"OPS_RUN_LEASE_SECONDS": "abc"}, "OPS_RUN_LEASE_SECONDS"),
    ({"OPS_RUN_LEASE_SECONDS": "0"}, "OPS_RUN_LEASE_SECONDS"),
    ({"OPS_RUN_LEASE_SECONDS": "86401"}, "OPS_RUN_LEASE_SECONDS"),
    ({"OPS_RUN_MAX_ATTEMPTS": "0"}, "OPS_RUN_MAX_ATTEMPTS"),
    ({"OPS_RUN_MAX_ATTEMPTS": "three"}, "OPS_RUN_MAX_ATTEMPTS"),
    ({"OPS_RUN_QUEUE_ENABLED": "perhaps"}, "OPS_RUN_QUEUE_ENABLED"),
    (
        {"ACTIVITY_CORE_WORKER_TOKEN": "worker-token-0123456789abcdef"},
        "ACTIVITY_CORE_WORKER_ID",
    ),
    ({"ACTIVITY_CORE_OPERATOR_TOKEN": "short"}, "ACTIVITY_CORE_OPERATOR_TOKEN"),
    (
        {"ACTIVITY_CORE_WORKER_TOKEN": "short", "ACTIVITY_CORE_WORKER_ID": "w@x"},
        "ACTIVITY_CORE_WORKER_TOKEN",
    ),
    (
        {"ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS": "maybe"},
        "ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS",
    ),
    ({"ACTIVITY_CORE_MAX_BODY_BYTES": "10"}, "ACTIVITY_CORE_MAX_BODY_BYTES"),
    ({"ACTIVITY_CORE_LOG_LEVEL": "LOUD"}, "ACTIVITY_CORE_LOG_LEVEL"),
    ({"ACTIVITY_CORE_QUEUE_VACUUM_DEAD_ROWS": "-1"}, "ACTIVITY_CORE_QUEUE_VACUUM_DEAD_ROWS"),
    ({"ACTIVITY_CORE_QUEUE_VACUUM_DEAD_ROWS": "lots"}, "ACTIVITY_CORE_QUEUE_VACUUM_DEAD_ROWS"),
    (
        {"ACTIVITY_CORE_DB_POOL_MIN": "30", "ACTIVITY_CORE_DB_POOL_MAX": "5"},
        "ACTIVITY_CORE_DB_POOL_MIN",
    ),
    ({"ACTIVITY_CORE_DATABASE_URL": "not-a-url"}, "ACTIVITY_CORE_DATABASE_URL"),
    ({"ACTIVITY_CORE_DATABASE_URL": "mysql://u@h/db"}, "ACTIVITY_CORE_DATABASE_URL"),
    (
        {"ACTIVITY_CORE_DATABASE_URL": f"postgresql://u:{PASSWORD}@h:port/db"},
        "ACTIVITY_CORE_DATABASE_URL",
    ),
    (
        {"ACTIVITY_CORE_DATABASE_URL": f"postgres://u:{PASSWORD}@h:99999/db"},
        "ACTIVITY_CORE_DATABASE_URL",
    ),
]


@pytest.mark.parametrize(
    ("variables", "named"), BAD_SETTINGS, ids=[f"{v}"[:70] for v, _ in BAD_SETTINGS]
)
@pytest.mark.parametrize("command", ["migrate", "serve"])
def test_a_bad_setting_is_exit_2_and_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variables: dict[str, str],
    named: str,
    command: str,
) -> None:
    for name in list(os.environ):
        if name.startswith(("ACTIVITY_CORE_", "OPS_RUN_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ACTIVITY_CORE_DATABASE_URL", UNREACHABLE_URL)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)

    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command went past a bad setting")

    monkeypatch.setattr(cli, "configure_logging", must_not_run)
    assert cli.main([command]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("activity-core: ")
    assert named in lines[0]
    assert captured.out == ""
    for value in variables.values():
        if "token" in value or PASSWORD in value:
            assert value not in captured.err
    assert PASSWORD not in captured.err


# -- the console script's exit (temporalio/sdk-python issue 300) ----------------------------


class _Exited(Exception):
    pass


def test_once_temporal_was_loaded_the_script_ends_without_interpreter_teardown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise _Exited

    monkeypatch.setattr(cli, "main", lambda: 3)
    monkeypatch.setitem(sys.modules, cli.TEMPORAL_BRIDGE_MODULE, types.ModuleType("bridge"))
    monkeypatch.setattr(os, "_exit", fake_exit)
    with pytest.raises(_Exited):
        cli.console_main()
    assert exits == [3]


def test_without_temporal_the_script_exits_the_ordinary_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "main", lambda: 4)
    monkeypatch.delitem(sys.modules, cli.TEMPORAL_BRIDGE_MODULE, raising=False)
    monkeypatch.setattr(os, "_exit", lambda code: pytest.fail(f"os._exit({code})"))
    with pytest.raises(SystemExit) as exited:
        cli.console_main()
    assert exited.value.code == 4


async def test_output_survives_the_exit_without_teardown_into_a_pipe(db_dsn: str) -> None:
    # stdout into a pipe is block-buffered: os._exit without a flush would drop this line.
    env = clean_env(ACTIVITY_CORE_DATABASE_URL=db_dsn)
    env.pop("PYTHONUNBUFFERED", None)
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import {cli.TEMPORAL_BRIDGE_MODULE}; "
            "from activity_core.cli import console_main; console_main()",
            "migrate",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "migrations applied: none (schema current)" in completed.stdout


def test_the_installed_script_is_console_main() -> None:
    scripts = importlib.metadata.entry_points(group="console_scripts", name="activity-core")
    assert [script.value for script in scripts] == ["activity_core.cli:console_main"]


@pytest.mark.parametrize("group", ["runs", "automations"])
def test_operator_commands_need_no_service_settings_only_a_token(
    group: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A database URL the service would refuse: the operator commands never read it.
    monkeypatch.setenv("ACTIVITY_CORE_DATABASE_URL", "not a url")
    monkeypatch.delenv("ACTIVITY_CORE_OPERATOR_TOKEN", raising=False)
    monkeypatch.delenv("ACTIVITY_CORE_OPERATOR_TOKEN_FILE", raising=False)
    assert cli.main([group, "list"]) == 2
    err = capsys.readouterr().err
    assert f"activity-core {group}: no operator token" in err
    assert "ACTIVITY_CORE_DATABASE_URL" not in err
