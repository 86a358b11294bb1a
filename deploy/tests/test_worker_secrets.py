"""The Secrets reach the pods as files, and the services accept what those files hold.

deploy/k8s/secrets/worker-secrets.sh writes the workers' tokens and activity-core's
credentials file (and, given a file, the git remote's token); kubectl is replaced by a
stand-in that records what each `create secret generic` would store, so no cluster is
needed. The `activity-core` Secret is made from
secrets/activity-core.example.env as deploy/README.md says (`--from-env-file`).

The manifests are rendered with kubectl kustomize at validate-deploy's pinned version (each
app overlay and its release Jobs). No container takes a Secret through its environment;
every `*_FILE` variable names a file of a read-only Secret volume that the container's
group, and no other user, can read. Then pods are played on the local filesystem: their
volumes projected under a scratch root as the kubelet would (the Secrets above, the
ConfigMaps as rendered), their environment resolved as the kubelet does (ConfigMaps, the
downward API's pod name, `$(VAR)`), and the services' own settings loaders, or their real
entry point, run with it: every activity-core container starts with the database URL its
Secret holds (the API alone with the operator token), every worker pod with the token
activity-core binds to its worker id, and a worker pod beyond the tokens stops at start
with one line naming ACTIVITY_CORE_WORKER_TOKEN_FILE and the missing file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from activity_core.http.auth import load_worker_credentials, token_digest
from activity_core.settings import SECRET_VARIABLES, ActivityCoreSettings
from activity_core.settings import load_settings as load_activity_core_settings
from made_secrets import REPOSITORY_TOKEN, SCRIPT, made_secrets, worker_secrets
from rein_aharness.settings import load_settings as load_rein_aharness_settings
from rendered_pods import Obj, Secrets, containers, environment, mounted_at, project, workloads

ENTRY_POINT = Path(sys.executable).with_name("rein-aharness")

RENDERED = ("dev", "dev/release", "prod", "prod/release")
APPS = ("dev", "prod")
WORKER = ("StatefulSet", "rein-aharness")
TOKEN_FILE = "ACTIVITY_CORE_WORKER_TOKEN_FILE"


def _set_environment(monkeypatch: pytest.MonkeyPatch, names: set[str], env: dict[str, str]) -> None:
    for name in list(os.environ):
        if name.upper() in names:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


# -- the helper ------------------------------------------------------------------------------


def test_worker_secrets_bind_each_pod_to_its_own_token(tmp_path: Path) -> None:
    done, out = worker_secrets(tmp_path, 3)
    assert done.returncode == 0, done.stderr

    tokens = {
        p.name: p.read_text(encoding="utf-8")
        for p in (out / "rein-aharness-worker-tokens").iterdir()
    }
    assert sorted(tokens) == ["rein-aharness-0", "rein-aharness-1", "rein-aharness-2"]
    assert len(set(tokens.values())) == 3
    for token in tokens.values():
        assert token not in done.stdout + done.stderr
        assert len(token) >= 16

    credentials = out / "activity-core-worker-credentials" / "credentials.json"
    workers = load_worker_credentials(credentials)
    assert workers == {pod: token_digest(token) for pod, token in tokens.items()}


def test_worker_secrets_writes_the_repository_token_only_from_a_file_given(
    tmp_path: Path,
) -> None:
    (tmp_path / "without").mkdir()
    done, out = worker_secrets(tmp_path / "without", 1)
    assert done.returncode == 0, done.stderr
    # rotating the worker tokens leaves the forge's token alone
    assert not (out / "rein-aharness-repository").exists()

    token_file = tmp_path / "forge-token"
    token_file.write_text(REPOSITORY_TOKEN + "\n", encoding="utf-8")
    (tmp_path / "with").mkdir()
    done, out = worker_secrets(tmp_path / "with", 1, str(token_file))
    assert done.returncode == 0, done.stderr
    assert (out / "rein-aharness-repository" / "token").read_bytes() == token_file.read_bytes()
    assert REPOSITORY_TOKEN not in done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "activity-core-worker-credentials",
        "rein-aharness-repository",
        "rein-aharness-worker-tokens",
    ]


@pytest.mark.parametrize(
    "content", [None, b"", b"two\nlines\n", b" padded\n"], ids=["missing", "empty", "two", "space"]
)
def test_worker_secrets_refuses_a_repository_token_file_the_worker_would(
    tmp_path: Path, content: bytes | None
) -> None:
    token_file = tmp_path / "forge-token"
    if content is not None:
        token_file.write_bytes(content)
    (tmp_path / "run").mkdir()
    done, out = worker_secrets(tmp_path / "run", 1, str(token_file))
    assert done.returncode == 2
    assert done.stderr == (
        f"{SCRIPT}: {token_file}: not a readable file holding one line, the token\n"
    )
    assert not out.exists()  # nothing written to the cluster


def test_worker_secrets_refuses_bad_arguments(tmp_path: Path) -> None:
    for argv in ([], ["ops-queue"], ["ops-queue", "0"], ["ops-queue", "two"], ["a", "1", "b", "c"]):
        done = subprocess.run(
            [str(SCRIPT), *argv], capture_output=True, text=True, check=False, cwd=tmp_path
        )
        assert done.returncode == 2, argv
        assert "usage:" in done.stderr


# -- the manifests ---------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", RENDERED)
def test_no_container_takes_a_secret_through_its_environment(overlay: str) -> None:
    for key, workload in workloads(overlay).items():
        for container in containers(workload["spec"]["template"]["spec"]):
            where = (*key, container["name"])
            for source in container.get("envFrom", []):
                assert "secretRef" not in source, where
            for entry in container.get("env", []):
                assert "secretKeyRef" not in entry.get("valueFrom", {}), (*where, entry["name"])


@pytest.mark.parametrize("overlay", RENDERED)
def test_each_secret_a_container_mounts_is_a_file_variable_only_its_group_reads(
    overlay: str,
) -> None:
    checked = 0
    for key, workload in workloads(overlay).items():
        pod = workload["spec"]["template"]["spec"]
        volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
        pod_context = pod["securityContext"]
        for container in containers(pod):
            group = container.get("securityContext", {}).get("runAsGroup")
            mounted = {
                mount["name"]
                for mount in container.get("volumeMounts", [])
                if "secret" in volumes.get(mount["name"], {})
            }
            read = set()
            for entry in container.get("env", []):
                if not entry["name"].endswith("_FILE"):
                    continue
                where = (*key, container["name"], entry["name"])
                mount = mounted_at(container, entry["value"])
                assert mount is not None, where
                assert mount.get("readOnly") is True, where
                secret = volumes[mount["name"]]["secret"]
                name = entry["value"].removeprefix(mount["mountPath"].rstrip("/") + "/")
                items = {item["path"]: item for item in secret.get("items", [])}
                assert not items or name in items, where
                # The kubelet writes the files as root, group fsGroup, and adds 0440 to
                # their mode: the container reads them through its group, others not at all.
                mode = items.get(name, {}).get("mode", secret.get("defaultMode", 0o644))
                assert mode in (0o400, 0o440), (*where, oct(mode))
                assert pod_context.get("fsGroup") == (group or pod_context.get("runAsGroup")), where
                read.add(mount["name"])
            # no Secret mounted that the service does not read through a `_FILE` variable
            assert read == mounted, (*key, container["name"])
            checked += len(read)
    assert checked


@pytest.mark.parametrize("overlay", RENDERED)
def test_activity_core_starts_with_what_its_secret_holds(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = made_secrets(tmp_path, 1)
    expected = {k: v.decode() for k, v in secrets["activity-core"].items()}
    read = {field.alias for field in ActivityCoreSettings.model_fields.values() if field.alias}
    read |= {f"{variable}_FILE" for variable in SECRET_VARIABLES}
    started = []
    for key, workload in workloads(overlay).items():
        pod = workload["spec"]["template"]["spec"]
        for container in containers(pod):
            argv = [*container.get("command", []), *container.get("args", [])]
            if argv[0] != "activity-core":
                continue
            root = tmp_path / "pods" / key[1] / container["name"]
            project(overlay, pod, container, root, secrets)
            env = environment(overlay, f"{key[1]}-0", container, root)
            with monkeypatch.context() as patched:
                _set_environment(patched, read, env)
                settings = load_activity_core_settings()
            assert settings.database_url == expected["database-url"], (key, argv)
            # the operator token only where the API serves
            serves = argv[1] == "serve"
            assert settings.operator_token == (expected["operator-token"] if serves else None)
            if serves:
                assert settings.worker_credentials_file is not None
                assert load_worker_credentials(settings.worker_credentials_file)
            started.append((key[1], argv[1]))
    assert started
    if overlay.endswith("release"):
        assert sorted(started) == [
            ("release-activity-core-migrate", "migrate"),
            ("release-activity-core-sync-definitions", "migrate"),
            ("release-activity-core-sync-definitions", "sync-definitions"),
        ]
    else:
        assert sorted(started) == [
            ("activity-core", "migrate"),
            ("activity-core", "serve"),
            ("activity-core-temporal-worker", "temporal-worker"),
        ]


def _worker_pod(
    overlay: str, ordinal: int, root: Path, secrets: Secrets
) -> tuple[Obj, dict[str, str]]:
    """The worker container of StatefulSet pod `ordinal`, and its environment."""
    workload = workloads(overlay)[WORKER]
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    project(overlay, pod, container, root, secrets)
    env = environment(overlay, f"{workload['metadata']['name']}-{ordinal}", container, root)
    return container, env


def _replicas(overlay: str) -> int:
    return int(workloads(overlay)[WORKER]["spec"]["replicas"])


@pytest.mark.parametrize("overlay", APPS)
def test_each_worker_pod_reads_the_token_bound_to_its_id(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replicas = _replicas(overlay)
    secrets = made_secrets(tmp_path, replicas)
    workers = load_worker_credentials(
        tmp_path / "secrets" / "activity-core-worker-credentials" / "credentials.json"
    )
    for ordinal in range(replicas):
        root = tmp_path / "pods" / str(ordinal)
        container, env = _worker_pod(overlay, ordinal, root, secrets)
        # a plain process, no shell: nothing but rein-aharness sees the token
        assert container["command"] == ["rein-aharness", "run"], container["command"]
        assert "ACTIVITY_CORE_WORKER_TOKEN" not in env
        with monkeypatch.context() as patched:
            _set_environment(patched, {n.upper() for n in os.environ}, env)
            settings = load_rein_aharness_settings()
        assert settings.activity_core_worker_id == f"rein-aharness-{ordinal}"
        token = settings.activity_core_worker_token
        assert token is not None
        assert workers[settings.activity_core_worker_id] == token_digest(token.get_secret_value())

        probe = container["readinessProbe"]["exec"]["command"]
        done = _run(probe, env)
        assert done.returncode == 0, done.stderr


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "rein-aharness", argv
    return subprocess.run(
        [str(ENTRY_POINT), *argv[1:]],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("overlay", APPS)
def test_a_worker_pod_without_a_token_stops_naming_the_file(overlay: str, tmp_path: Path) -> None:
    replicas = _replicas(overlay)
    secrets = made_secrets(tmp_path, replicas)
    root = tmp_path / "pod"
    container, env = _worker_pod(overlay, replicas, root, secrets)
    missing = root / "etc" / "rein-aharness" / "worker-tokens" / f"rein-aharness-{replicas}"
    assert env[TOKEN_FILE] == str(missing)
    for argv in (container["command"], container["readinessProbe"]["exec"]["command"]):
        done = _run(argv, env)
        assert (done.returncode, done.stdout) == (2, ""), argv
        assert done.stderr == (
            f"rein-aharness: invalid setting {TOKEN_FILE}: "
            f"cannot read {missing} (No such file or directory)\n"
        )
