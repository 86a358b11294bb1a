"""Every console script a workspace member declares answers `--version` with its
package's version, in a bare environment: no settings, no database, no network."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from ops_devsupport.processes import run_console_script

REPO = Path(__file__).resolve().parents[2]


def _members() -> list[Path]:
    root = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns: list[str] = root["tool"]["uv"]["workspace"]["members"]
    return sorted(
        path.parent for pattern in patterns for path in REPO.glob(f"{pattern}/pyproject.toml")
    )


def _scripts() -> list[tuple[str, str, str]]:
    """(script, its package's name, that package's version) for every declared script."""
    found = []
    for member in _members():
        project = tomllib.loads((member / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        for script in project.get("scripts", {}):
            found.append((script, project["name"], project["version"]))
    return found


def test_every_console_script_answers_version_with_nothing_but_its_package(
    tmp_path: Path,
) -> None:
    scripts = _scripts()
    # a new script is taken in by this loop; these are the ones there are today
    assert sorted(script for script, _, _ in scripts) == [
        "activity-core",
        "ops-demo",
        "rein-aharness",
    ]
    for script, package, version in scripts:
        assert importlib.metadata.version(package) == version, package
        completed = run_console_script(
            script, "--version", env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, cwd=tmp_path
        )
        assert completed.returncode == 0, completed
        assert completed.stdout == f"{script} {version}\n", completed
        assert completed.stderr == "", completed
