"""One convention in every package and service (STYLE.md): each module states what it
offers in `__all__`, and `__all__` names only what the module defines or imports. Ruff
holds the import convention (absolute imports, TID252); this holds `__all__`, which no
linter rule requires."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_TREES = [
    *sorted((ROOT / "packages").glob("*/src")),
    *sorted((ROOT / "services").glob("*/src")),
    ROOT / "demo" / "src",
]
# A package's __init__ re-exports (its own rule), a __main__ is run, never imported.
NOT_MODULES = {"__init__.py", "__main__.py"}


def _modules() -> list[Path]:
    found = [
        path
        for tree in SOURCE_TREES
        for path in sorted(tree.rglob("*.py"))
        if path.name not in NOT_MODULES and "migrations" not in path.parts
    ]
    assert len(found) > 100, "the source trees moved"
    return found


def _declared(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(value, ast.List | ast.Tuple), "__all__ is a literal list"
            return [ast.literal_eval(element) for element in value.elts]
    return None


def _bound_names(tree: ast.Module) -> set[str]:
    """Names bound at the module's top level (including inside if/try/with blocks)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_states_what_it_offers(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    declared = _declared(tree)
    assert declared is not None, f"{path.relative_to(ROOT)} has no __all__"
    assert len(declared) == len(set(declared)), "a name is listed twice"
    missing = set(declared) - _bound_names(tree)
    assert not missing, f"__all__ names what the module does not have: {sorted(missing)}"


def test_each_service_test_is_a_unit_or_an_integration_test() -> None:
    """Both services file their tests the same way: tests/unit (no database, no process,
    no network) and tests/integration; kits and conftest stay at tests/."""
    misplaced = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "services").glob("*/tests/**/test_*.py"))
        if path.parent.name == "tests"
    ]
    assert not misplaced, misplaced
    for service in sorted((ROOT / "services").glob("*/tests")):
        assert (service / "unit").is_dir() and (service / "integration").is_dir(), service
