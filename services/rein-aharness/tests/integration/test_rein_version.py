"""`rein-aharness --version`: the installed package's version, read from its metadata,
before and without any setting, outbox or queue."""

from __future__ import annotations

from pathlib import Path

from ops_testsupport.console import assert_version_needs_no_settings


def test_version_prints_the_installed_version_without_settings(tmp_path: Path) -> None:
    # settings that stop every command at its start
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ACTIVITY_CORE_URL": "::",
        "REIN_AHARNESS_STATE_DIR": str(tmp_path / "state"),
    }
    assert_version_needs_no_settings(
        "rein-aharness", ["close-outbox", "status"], env=env, cwd=tmp_path
    )
