"""The worker's sandbox as the manifests set it up (deploy/README.md, "The worker's sandbox").

The worker pod runs in a user namespace, its container with an unmasked proc and the
Localhost seccomp profile shipped in deploy/k8s/seccomp/; every other container keeps the
runtime's default profile. The namespaces enforce Pod Security "baseline" only, since
"restricted" refuses procMount Unmasked, so this module holds every pod to the rest of
"restricted" instead. checkov cannot help here: it reads the pod-level seccomp profile
only, which stays RuntimeDefault.

The profile is checked as a file (it parses, allows by default, refuses only names the
kernel knows and none of the calls bubblewrap needs) and, where the host permits user
namespaces, in use: seccomp_probe_child.py loads it as runc does and runs the worker's own
sandbox probe under it, as the worker's user.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
SECCOMP_DIR = K8S / "seccomp"
SECCOMP_PROFILE = SECCOMP_DIR / "rein-aharness-bwrap.json"
PROBE_CHILD = Path(__file__).with_name("seccomp_probe_child.py")

WORKER = ("StatefulSet", "rein-aharness")
WORKER_CONTAINER = "rein-aharness"
ESCAPE_HATCH = "REIN_AHARNESS_ALLOW_UNSANDBOXED"

# What bubblewrap needs and the runtime default refuses without CAP_SYS_ADMIN.
NAMESPACE_SYSCALLS = ("clone", "clone3", "unshare", "setns", "mount", "umount2", "pivot_root")
# The 64-bit ABIs the images run; 32-bit and x32 calls are refused outright.
ARCHITECTURES = {"SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"}
# Pod Security "restricted" (what the namespaces no longer enforce).
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SECURITY_KEYS = ("securityContext", "seccompProfile", "procMount", "hostUsers", "capabilities")


def _patch_files() -> set[Path]:
    """The files a kustomization applies as patches: partial objects, not manifests."""
    patches: set[Path] = set()
    for kustomization in K8S.rglob("kustomization.yaml"):
        data = yaml.safe_load(kustomization.read_text(encoding="utf-8")) or {}
        for patch in data.get("patches", []):
            if isinstance(patch, dict) and "path" in patch:
                patches.add((kustomization.parent / patch["path"]).resolve())
    return patches


def _objects() -> Iterator[tuple[Path, dict[str, Any]]]:
    patches = _patch_files()
    for path in sorted(K8S.rglob("*.yaml")):
        if path.resolve() in patches:
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and "kind" in doc and doc["kind"] != "Kustomization":
                yield path, doc


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    kind, spec = obj["kind"], obj.get("spec", {})
    pod: dict[str, Any] | None = None
    if kind == "Pod":
        pod = spec
    elif kind == "CronJob":
        pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        pod = spec["template"]["spec"]
    return pod


def _pods() -> dict[tuple[str, str], dict[str, Any]]:
    pods = {}
    for _path, obj in _objects():
        spec = _pod_spec(obj)
        if spec is not None:
            pods[(obj["kind"], obj["metadata"]["name"])] = spec
    return pods


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _worker() -> tuple[dict[str, Any], dict[str, Any]]:
    pod = _pods()[WORKER]
    (container,) = [c for c in pod["containers"] if c["name"] == WORKER_CONTAINER]
    return pod, container


def _profile() -> dict[str, Any]:
    data = json.loads(SECCOMP_PROFILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _libseccomp() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("seccomp")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


POD_IDS = sorted(_pods())


def test_worker_pod_can_create_the_sandbox() -> None:
    pod, container = _worker()
    assert pod["hostUsers"] is False
    context = container["securityContext"]
    assert context["procMount"] == "Unmasked"
    seccomp = context["seccompProfile"]
    assert seccomp["type"] == "Localhost"
    assert (SECCOMP_DIR / seccomp["localhostProfile"]).is_file(), seccomp
    # The sandbox is made from what an unprivileged user may do in its own namespaces:
    # the container gains nothing for it.
    assert context["allowPrivilegeEscalation"] is False
    assert context["privileged"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["runAsNonRoot"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}


def test_every_other_container_keeps_the_runtime_default() -> None:
    for key, pod in _pods().items():
        pod_profile = pod["securityContext"]["seccompProfile"]
        assert pod_profile == {"type": "RuntimeDefault"}, key
        for container in _containers(pod):
            if (key, container["name"]) == (WORKER, WORKER_CONTAINER):
                continue
            context = container.get("securityContext", {})
            assert context.get("seccompProfile", pod_profile) == {"type": "RuntimeDefault"}, (
                key,
                container["name"],
            )
            assert context.get("procMount", "Default") == "Default", (key, container["name"])


@pytest.mark.parametrize("key", POD_IDS, ids=lambda k: "/".join(k))
def test_every_pod_meets_the_rest_of_restricted(key: tuple[str, str]) -> None:
    pod = _pods()[key]
    for volume in pod.get("volumes", []):
        assert RESTRICTED_VOLUMES & volume.keys(), f"volume {volume['name']}"
    pod_context = pod.get("securityContext", {})
    assert pod_context.get("runAsUser") != 0
    for container in _containers(pod):
        context = container.get("securityContext", {})
        name = container["name"]
        assert context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True, name
        assert context.get("runAsUser") != 0, name
        assert context.get("allowPrivilegeEscalation") is False, name
        capabilities = context.get("capabilities", {})
        assert "ALL" in capabilities.get("drop", []), name
        assert set(capabilities.get("add", [])) <= {"NET_BIND_SERVICE"}, name


def test_overlays_leave_security_settings_to_the_base() -> None:
    """The checks above read the base and release manifests, so no overlay and no patch
    (a component's included) may change what they check."""
    patches = _patch_files()
    assert patches, "the monitoring component patches the API's Deployment"
    overlay_files = {p.resolve() for p in (K8S / "overlays").rglob("*") if p.is_file()}
    for path in sorted(overlay_files | patches):
        if path.name != "namespace.yaml":
            text = path.read_text(encoding="utf-8")
            for word in SECURITY_KEYS:
                assert word not in text, f"{path.relative_to(REPO)} mentions {word}"


def test_namespaces_enforce_baseline_and_warn_about_restricted() -> None:
    namespaces = [obj for _path, obj in _objects() if obj["kind"] == "Namespace"]
    assert namespaces
    for namespace in namespaces:
        labels = namespace["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
        assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"
        assert labels["pod-security.kubernetes.io/warn"] == "restricted"
        assert labels["pod-security.kubernetes.io/audit"] == "restricted"


def test_seccomp_profile_refuses_none_of_what_bwrap_needs() -> None:
    profile = _profile()
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    assert set(profile["architectures"]) == ARCHITECTURES
    refused: list[str] = []
    for rule in profile["syscalls"]:
        assert rule["action"] == "SCMP_ACT_ERRNO", rule
        assert isinstance(rule["errnoRet"], int), rule
        refused += rule["names"]
        for arg in rule.get("args", []):
            # Masked to 32 bits: the kernel ignores the upper half of an int argument,
            # so a plain comparison could be passed by setting it.
            assert (arg["op"], arg["value"]) == ("SCMP_CMP_MASKED_EQ", 0xFFFFFFFF), rule
    assert len(refused) == len(set(refused)), "a syscall is listed twice"
    assert not set(NAMESPACE_SYSCALLS) & set(refused)


def test_seccomp_profile_names_are_syscalls() -> None:
    """A misspelt name in a denylist refuses nothing, silently (runc skips unknown names)."""
    lib = _libseccomp()
    assert lib is not None, "libseccomp is needed to check the profile (Debian: libseccomp2)"
    lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    arches = [
        lib.seccomp_arch_resolve_name(a.removeprefix("SCMP_ARCH_").lower().encode())
        for a in sorted(ARCHITECTURES)
    ]
    for rule in _profile()["syscalls"]:
        for name in rule["names"]:
            numbers = [lib.seccomp_syscall_resolve_name_arch(a, name.encode()) for a in arches]
            assert max(numbers) >= 0, f"{name} is no syscall of {sorted(ARCHITECTURES)}"


def test_escape_hatch_is_not_shipped() -> None:
    for path in sorted(K8S.rglob("*")):
        if path.is_file():
            assert ESCAPE_HATCH.encode() not in path.read_bytes(), path.relative_to(REPO)


def _probe_under(profile: Path) -> dict[str, Any]:
    assert _libseccomp() is not None, "libseccomp is needed (Debian: libseccomp2)"
    done = subprocess.run(
        [sys.executable, str(PROBE_CHILD), str(profile)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    assert result["baseline"] is None, (
        f"this host refuses the sandbox even without seccomp: {result['baseline']}"
    )
    assert result["seccomp_mode"] == "2", "the filter was not loaded"
    return result


def test_bwrap_builds_the_sandbox_under_the_profile() -> None:
    result = _probe_under(SECCOMP_PROFILE)
    assert result["filtered"] is None
    wrong = {name: pair for name, pair in result["errnos"].items() if pair[0] != pair[1]}
    assert not wrong, f"[expected errno, got]: {wrong}"


def test_the_runtime_default_refusals_stop_the_sandbox(tmp_path: Path) -> None:
    """What the runtime default refuses without CAP_SYS_ADMIN is what bwrap needs: the
    probe above would notice a profile that still refused it."""
    refusing = tmp_path / "refusing.json"
    refusing.write_text(
        json.dumps(
            {
                "defaultAction": "SCMP_ACT_ALLOW",
                "syscalls": [
                    {
                        "names": ["unshare", "mount", "umount2", "pivot_root", "setns"],
                        "action": "SCMP_ACT_ERRNO",
                        "errnoRet": 1,
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    result = _probe_under(refusing)
    assert result["filtered"] is not None
    assert "bwrap" in result["filtered"]
    assert "Operation not permitted" in result["filtered"]
