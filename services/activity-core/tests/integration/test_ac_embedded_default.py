"""With ACTIVITY_CORE_DATABASE_URL unset, the commands run on the embedded PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from activity_core.db.migrate import bundled_migrations

ENTRY = "from activity_core.cli import console_main; console_main()"


def run_cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTIVITY_CORE_", "OPS_RUN_"))}
    env["ACTIVITY_CORE_STATE_DIR"] = str(state_dir)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from activity_core.cli import console_main; console_main()",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_migrate_starts_then_reuses_the_embedded_server(tmp_path: Path) -> None:
    first = run_cli(tmp_path, "migrate")
    assert first.returncode == 0, first.stderr
    assert f"embedded PostgreSQL at {tmp_path / 'pgdata'}" in first.stderr
    assert f"migrations applied: {[m.version for m in bundled_migrations()]}" in first.stdout
    assert (tmp_path / "pgdata" / "PG_VERSION").exists()
    assert "Traceback" not in first.stderr

    second = run_cli(tmp_path, "migrate")
    assert second.returncode == 0, second.stderr
    assert "none (schema current)" in second.stdout
