"""The package surface and its dependency boundary (pydantic + stdlib only)."""

import ast
import sys
from pathlib import Path

import ops_contracts

SOURCE = Path(ops_contracts.__file__).parent


def test_every_public_name_is_exported() -> None:
    for name in ops_contracts.__all__:
        assert getattr(ops_contracts, name) is not None
    assert sorted(ops_contracts.__all__) == sorted(set(ops_contracts.__all__))


def test_contracts_import_only_pydantic_and_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"pydantic", "ops_contracts", "__future__"}
    for module in SOURCE.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                assert root in allowed, f"{module.name} imports {root}"


def test_package_is_typed() -> None:
    assert (SOURCE / "py.typed").exists()
