"""`rein-aharness --version`: the installed package's version, read from its metadata,
before and without any setting, outbox or queue."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

from ops_devsupport.processes import run_console_script


def run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_console_script("rein-aharness", *args, env=env, cwd=cwd)


def test_version_prints_the_installed_version_without_settings(tmp_path: Path) -> None:
    # settings that stop every command at its start
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ACTIVITY_CORE_URL": "::",
        "REIN_AHARNESS_STATE_DIR": str(tmp_path / "state"),
    }
    refused = run("close-outbox", "status", env=env, cwd=tmp_path)
    assert refused.returncode == 2, refused

    completed = run("--version", env=env, cwd=tmp_path)
    assert completed.returncode == 0, completed
    assert completed.stdout == f"rein-aharness {importlib.metadata.version('rein-aharness')}\n"
    assert completed.stderr == ""
