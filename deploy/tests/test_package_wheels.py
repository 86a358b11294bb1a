"""The shared packages other teams import build as wheels that stand on their own.

Each package is built with `uv build` into a scratch directory, the wheel's metadata is
checked (README as its description, the LICENSE file and the license expression, the
dependencies its pyproject declares), and it is installed with pip into a fresh venv that
holds nothing else (pip fetches the declared dependencies from the package index). Then,
from outside the repository, its public names import from the venv and the README's
example runs there as written.
"""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LICENSE_EXPRESSION = "LicenseRef-Proprietary"
# name -> (directory, import package, workspace packages that must not come along)
PACKAGES = {
    "ops-contracts": ("packages/contracts", "ops_contracts", {"ops-evidence"}),
    "ops-evidence": ("packages/evidence", "ops_evidence", {"ops-contracts", "pydantic"}),
}
SERVICES = {"activity-core", "rein-aharness", "ops-demo"}
_EXAMPLE = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _build(package: str, out: Path) -> Path:
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH"
    subprocess.run(
        [uv, "build", "--package", package, "--wheel", "--out-dir", str(out), "--quiet"],
        cwd=REPO,
        check=True,
        timeout=300,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


def _metadata(wheel: Path) -> tuple[email.message.Message, set[str]]:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
    return metadata, names


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # -I: isolated, so neither the repository nor PYTHONPATH nor user site-packages is seen
    return subprocess.run(
        [str(python), "-I", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_wheel_installs_and_imports_in_a_venv_of_its_own(package: str, tmp_path: Path) -> None:
    directory, module, strangers = PACKAGES[package]
    project = tomllib.loads((REPO / directory / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"
    ]
    readme = (REPO / directory / "README.md").read_text(encoding="utf-8")
    license_text = (REPO / directory / "LICENSE").read_text(encoding="utf-8")
    assert "license to be decided" in license_text.lower()

    wheel = _build(package, tmp_path / "dist")
    metadata, names = _metadata(wheel)
    assert metadata["Name"] == package
    assert metadata["Version"] == project["version"]
    assert metadata["License-Expression"] == LICENSE_EXPRESSION == project["license"]
    assert "Private :: Do Not Upload" in metadata.get_all("Classifier", [])
    assert str(metadata.get_payload()).strip() == readme.strip()
    assert sorted(metadata.get_all("Requires-Dist", [])) == sorted(project["dependencies"])
    dist_info = f"{module}-{project['version']}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert f"{module}/py.typed" in names
    assert all(n.startswith((f"{module}/", f"{dist_info}/")) for n in names), names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = _run(
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-input",
        str(wheel),
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr

    listed = _run(python, "-m", "pip", "list", "--format=freeze", cwd=tmp_path)
    installed = {_normalized(line.split("==")[0]) for line in listed.stdout.split()}
    assert _normalized(package) in installed
    assert not installed & {_normalized(n) for n in strangers | SERVICES}, installed

    surface = _run(
        python,
        "-c",
        f"import {module}, pathlib, sys; "
        f"assert pathlib.Path({module}.__file__).is_relative_to(sys.prefix), {module}.__file__; "
        f"[getattr({module}, name) for name in {module}.__all__]; "
        f"print(len({module}.__all__))",
        cwd=tmp_path,
    )
    assert surface.returncode == 0, surface.stderr
    assert int(surface.stdout) > 0

    (example,) = _EXAMPLE.findall(readme)
    ran = _run(python, "-c", example, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
