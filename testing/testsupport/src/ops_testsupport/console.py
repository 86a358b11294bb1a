"""A service's console script, run as a user runs it: `--version` needs no setting at all."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from ops_devsupport.processes import run_console_script

__all__ = ["assert_version_needs_no_settings"]


def assert_version_needs_no_settings(
    script: str, refused: list[str], *, env: dict[str, str], cwd: Path, named: str | None = None
) -> None:
    """`env` holds settings that stop the command `refused` at its start (exit 2, naming
    `named` when given); `script --version` still prints the installed package's version
    from its metadata, and nothing else."""
    stopped = run_console_script(script, *refused, env=env, cwd=cwd)
    assert stopped.returncode == 2, stopped
    if named is not None:
        assert named in stopped.stderr, stopped.stderr
    completed = run_console_script(script, "--version", env=env, cwd=cwd)
    assert completed.returncode == 0, completed
    assert completed.stdout == f"{script} {importlib.metadata.version(script)}\n"
    assert completed.stderr == ""
