"""`ops-demo --version`: the installed package's version, read from its metadata; it
starts nothing (no PostgreSQL, no Temporal, no state directory)."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

from ops_demo.stack import console_script


def test_version_prints_the_installed_version_and_starts_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    completed = subprocess.run(
        [str(console_script("ops-demo")), "--version"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed
    assert completed.stdout == f"ops-demo {importlib.metadata.version('ops-demo')}\n"
    assert completed.stderr == ""
    # nothing was created: not even the default state directory under HOME
    assert not home.exists()
