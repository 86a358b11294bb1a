"""`activity-core --version`: the installed package's version, read from its metadata,
before and without any setting, database or Temporal."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

from ops_devsupport.processes import run_console_script


def run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_console_script("activity-core", *args, env=env, cwd=cwd)


def test_version_prints_the_installed_version_without_settings(tmp_path: Path) -> None:
    # a setting that stops every command at its start, and no database anywhere
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ACTIVITY_CORE_DB_POOL_MAX": "not-a-number",
        "ACTIVITY_CORE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    }
    refused = run("migrate", env=env, cwd=tmp_path)
    assert refused.returncode == 2, refused
    assert "ACTIVITY_CORE_DB_POOL_MAX" in refused.stderr

    completed = run("--version", env=env, cwd=tmp_path)
    assert completed.returncode == 0, completed
    assert completed.stdout == f"activity-core {importlib.metadata.version('activity-core')}\n"
    assert completed.stderr == ""
