"""Every profile catalogue the manifests ship is one the worker accepts at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from rein_aharness.profiles.catalogue import load_catalogue

ROOT = Path(__file__).resolve().parents[2]
CATALOGUES = [*sorted(ROOT.glob("deploy/k8s/**/profiles.yaml")), ROOT / "examples/profiles.yaml"]


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda p: str(p.relative_to(ROOT)))
def test_catalogue_loads(path: Path) -> None:
    catalogue = load_catalogue(path)
    assert catalogue.refs
    for ref in catalogue.refs:
        assert catalogue.resolve(ref) is not None
