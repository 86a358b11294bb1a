"""`ops-demo --version`: the installed package's version, read from its metadata; it
starts nothing (no PostgreSQL, no Temporal, no state directory)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from ops_devsupport.processes import run_console_script


def test_version_prints_the_installed_version_and_starts_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    completed = run_console_script(
        "ops-demo", "--version", env={"PATH": "/usr/bin:/bin", "HOME": str(home)}, cwd=tmp_path
    )
    assert completed.returncode == 0, completed
    assert completed.stdout == f"ops-demo {importlib.metadata.version('ops-demo')}\n"
    assert completed.stderr == ""
    # nothing was created: not even the default state directory under HOME
    assert not home.exists()
