"""The environment's console scripts (`activity-core`, `rein-aharness`, `ops-demo`): where
they are, and running one to its end with exactly the environment a test gives it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["console_script", "run_console_script"]


def console_script(name: str) -> Path:
    """A console script of this environment: beside the interpreter, else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"the `{name}` command is not installed (run `uv sync`)")
    return Path(found)


def run_console_script(
    name: str,
    *args: str,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run console script `name` to its end with exactly `env`: its exit code, stdout and
    stderr as text (a test reads all three; a non-zero exit is an answer, not an error)."""
    return subprocess.run(
        [str(console_script(name)), *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
