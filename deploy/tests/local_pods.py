"""A rendered container as a local process: its command, with exactly the rendered
environment, its volumes under a scratch root, and the network names and ports of a
cluster mapped onto this machine (test_manifest_start.py).

What is mapped, and how (everything else is the rendered value, untouched):

- **Paths.** Every env value and argument naming a path of one of the container's mounts
  (rendered_pods.moved_under): `/etc/activity-core/definitions` → `<root>/etc/...`.
- **The image.** argv[0] is the image's console script, the one in this venv (the image is
  this venv, installed by the Dockerfile; test_image_install.py replays that install). The
  image's runtime `ENV` lines (but PATH: this venv's bin directory, then the host's PATH,
  for git) and its `WORKDIR` (under root) come from the image's Dockerfile.
- **Ports.** Pods have an address each and reuse port numbers; local processes share one.
  Each declared containerPort gets a free local port, rewritten where the container is
  told to bind it: an env value `0.0.0.0:<port>` becomes `127.0.0.1:<local>`, and
  `--host 0.0.0.0 --port <port>` in argv becomes `--host 127.0.0.1 --port <local>`. A
  declared port that nothing binds this way is an error: the test could not reach it.
- **Services.** A URL naming a rendered Service (`http://activity-core`, with or without
  the namespace and `.svc.cluster.local`, at a Service port) becomes
  `http://127.0.0.1:<local port of the targeted container port>`.
- **What lives outside the manifests** (Temporal, State Hub, the git host): named by env
  variable, each given its local stand-in by the caller (`external`).

After mapping, no value may still name a cluster address (`*.svc*`, `0.0.0.0`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from activity_core.temporal.dev_server import free_port
from rendered_pods import (
    REPO,
    Obj,
    Secrets,
    environment,
    moved_under,
    project,
    rendered,
)

__all__ = ["LocalContainer", "PortPlan", "local_container", "plan_ports", "probes", "service_urls"]

DOCKERFILES = REPO / "deploy" / "docker"
VENV_BIN = Path(sys.executable).parent
# (workload name, container name) -> {containerPort: local port}
PortPlan = dict[tuple[str, str], dict[int, int]]
Stand_in = Callable[[str], str]

_CLUSTER_ADDRESS = re.compile(r"\.svc\b|\.cluster\.local\b|\b0\.0\.0\.0\b")


@dataclass
class LocalContainer:
    workload: tuple[str, str]  # (kind, name)
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    ports: dict[str, int] = field(default_factory=dict)  # port name and number -> local

    @property
    def where(self) -> str:
        return f"{self.workload[0]}/{self.workload[1]}:{self.name}"

    def popen(self, log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )

    def run(self, argv: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        """Another command in this container (an exec probe), with its environment."""
        return subprocess.run(
            [_executable(argv[0]), *argv[1:]],
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _executable(name: str) -> str:
    path = VENV_BIN / name
    assert path.is_file(), f"{name}: no such console script in {VENV_BIN}"
    return str(path)


def _image_name(image: str) -> str:
    """`registry/ops-queue/activity-core@sha256:…` or `ops-queue/activity-core:dev` →
    `activity-core`."""
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]


def _image_runtime(image: str) -> tuple[dict[str, str], str]:
    """The runtime stage's ENV (PATH left out) and WORKDIR of the image's Dockerfile."""
    dockerfile = DOCKERFILES / f"{_image_name(image)}.Dockerfile"
    text = dockerfile.read_text(encoding="utf-8").replace("\\\n", " ")
    stage = text[text.rindex("\nFROM ") :]
    env: dict[str, str] = {}
    for line in re.findall(r"^ENV (.+)$", stage, re.M):
        for name, value in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)", line):
            if name != "PATH":
                env[name] = value
    (workdir,) = re.findall(r"^WORKDIR (\S+)$", stage, re.M)
    return env, workdir


def _ports(container: Obj) -> list[Obj]:
    return list(container.get("ports", []))


def plan_ports(objects: tuple[Obj, ...]) -> PortPlan:
    """A free local port for every containerPort of every workload's containers."""
    plan: PortPlan = {}
    for obj in objects:
        if obj["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        pod = obj["spec"]["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            ports = {int(port["containerPort"]): free_port() for port in _ports(container)}
            plan[(obj["metadata"]["name"], container["name"])] = ports
    return plan


def service_urls(overlay: str, plan: PortPlan) -> list[tuple[re.Pattern[str], str]]:
    """For each rendered Service port: a pattern matching URLs that name it, and the local
    URL it maps to (the port of the container its selector and targetPort pick)."""
    objects = rendered(overlay)
    mapped = []
    for service in (obj for obj in objects if obj["kind"] == "Service"):
        name, namespace = service["metadata"]["name"], service["metadata"].get("namespace", "")
        selector = service["spec"].get("selector", {})
        for port in service["spec"].get("ports", []):
            local = _target(objects, plan, selector, port["targetPort"])
            host = rf"{re.escape(name)}(?:\.{re.escape(namespace)}(?:\.svc(?:\.cluster\.local)?)?)?"
            explicit = rf"(?::{port['port']})" + ("?" if port["port"] == 80 else "")
            pattern = re.compile(rf"http://{host}{explicit}(?=/|$)")
            mapped.append((pattern, f"http://127.0.0.1:{local}"))
    return mapped


def _target(objects: tuple[Obj, ...], plan: PortPlan, selector: Obj, target: str | int) -> int:
    for obj in objects:
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        labels = obj["spec"]["template"]["metadata"].get("labels", {})
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            for port in _ports(container):
                if target in (port.get("name"), port["containerPort"]):
                    return plan[(obj["metadata"]["name"], container["name"])][
                        int(port["containerPort"])
                    ]
    raise AssertionError(f"no container serves the Service port {target} ({selector})")


def _bind_rewrites(
    container: Obj, ports: dict[int, int], env: dict[str, str], argv: list[str]
) -> None:
    """Point every bind address of a declared port at its local port (module docstring)."""
    for number, local in ports.items():
        uses = 0
        for name, value in env.items():
            if value in (f"0.0.0.0:{number}", f"[::]:{number}"):
                env[name] = f"127.0.0.1:{local}"
                uses += 1
        for i, token in enumerate(argv[:-1]):
            if token == "--port" and argv[i + 1] == str(number):
                argv[i + 1] = str(local)
                uses += 1
        assert uses == 1, f"{container['name']}: containerPort {number} bound {uses} times"
    for i, token in enumerate(argv[:-1]):
        if token == "--host" and argv[i + 1] == "0.0.0.0":
            argv[i + 1] = "127.0.0.1"


def local_container(
    overlay: str,
    workload: Obj,
    container: Obj,
    *,
    root: Path,
    secrets: Secrets,
    plan: PortPlan,
    services: list[tuple[re.Pattern[str], str]],
    external: Mapping[str, Stand_in],
    ordinal: int = 0,
) -> LocalContainer:
    """`container` of pod `<workload>-<ordinal>`, materialised under root (its volumes
    written, shared with the pod's other containers given the same root)."""
    pod = workload["spec"]["template"]["spec"]
    name = workload["metadata"]["name"]
    project(overlay, pod, container, root, secrets)
    env = environment(overlay, f"{name}-{ordinal}", container, root)
    argv = [moved_under(container, root, arg) for arg in container["command"]]
    argv += [moved_under(container, root, arg) for arg in container.get("args", [])]
    ports = plan[(name, container["name"])]
    _bind_rewrites(container, ports, env, argv)
    for variable, value in list(env.items()):
        if variable in external:
            env[variable] = external[variable](value)
            continue
        for pattern, local in services:
            value = pattern.sub(local, value)
        env[variable] = value
    for value in [*env.values(), *argv]:
        assert not _CLUSTER_ADDRESS.search(value), f"{name}:{container['name']}: {value}"

    image_env, workdir = _image_runtime(container["image"])
    process_env = {**image_env, **env, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    cwd = root / workdir.lstrip("/")
    cwd.mkdir(parents=True, exist_ok=True)
    by_name = {
        str(port.get("name", port["containerPort"])): ports[int(port["containerPort"])]
        for port in _ports(container)
    }
    by_number = {str(number): local for number, local in ports.items()}
    return LocalContainer(
        workload=(workload["kind"], name),
        name=container["name"],
        argv=[_executable(argv[0]), *argv[1:]],
        env=process_env,
        cwd=cwd,
        ports={**by_number, **by_name},
    )


def probes(container: Obj) -> Iterator[tuple[str, Obj]]:
    """The container's probes, by kind."""
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        if kind in container:
            yield kind, container[kind]
