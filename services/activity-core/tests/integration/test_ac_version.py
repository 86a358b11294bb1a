"""`activity-core --version`: the installed package's version, read from its metadata,
before and without any setting, database or Temporal."""

from __future__ import annotations

from pathlib import Path

from ops_testsupport.console import assert_version_needs_no_settings


def test_version_prints_the_installed_version_without_settings(tmp_path: Path) -> None:
    # a setting that stops every command at its start, and no database anywhere
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ACTIVITY_CORE_DB_POOL_MAX": "not-a-number",
        "ACTIVITY_CORE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    }
    assert_version_needs_no_settings(
        "activity-core", ["migrate"], env=env, cwd=tmp_path, named="ACTIVITY_CORE_DB_POOL_MAX"
    )
