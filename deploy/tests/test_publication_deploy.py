"""Publication as deployed: the operator-approved push of a run's branch is activity-core's
Temporal worker's job, and that worker alone holds the publishing credential.

deploy/k8s/secrets/publication-secrets.sh writes the git host's push token (and, given a
second file, the forge API's token) from files; kubectl is replaced by the stand-in of
made_secrets.py. The manifests are rendered with kubectl kustomize at validate-deploy's
pinned version, the pods' volumes and environment played on the local filesystem
(rendered_pods.py), and activity-core's own settings loader and publication credential
helper run with them: the Temporal worker gets the overlay's repository URL and user name
and reads the token from the mounted Secret; no other container (API, release Jobs, the
workers) mounts a publishing Secret or has the repository settings; the git egress policy
selects the Temporal worker's pods alone. The Forgejo pull-request patch of deploy/README.md
("Publication") is applied to each app overlay as the README says, and the worker then
reads the API URL and the API token the same way.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from activity_core.settings import ActivityCoreSettings
from activity_core.settings import load_settings as load_activity_core_settings
from made_secrets import PUBLICATION_SCRIPT, PUBLICATION_TOKEN, made_secrets, publication_secrets
from ops_runtime.git_credential_helper import read_token
from rendered_pods import (
    OVERLAYS,
    REPO,
    Obj,
    config_map,
    containers,
    environment,
    mounted_at,
    project,
    rendered,
    workloads,
)

RENDERED = ("dev", "dev/release", "prod", "prod/release", "prod-monitoring")
APPS = ("dev", "prod", "prod-monitoring")
TEMPORAL_WORKER = ("Deployment", "activity-core-temporal-worker")
PUBLISHING_SECRETS = {"activity-core-repository", "activity-core-forgejo"}
REPOSITORY_SETTINGS = {
    "ACTIVITY_CORE_REPOSITORY_URL",
    "ACTIVITY_CORE_REPOSITORY_USERNAME",
    "ACTIVITY_CORE_REPOSITORY_TOKEN_FILE",
    "ACTIVITY_CORE_FORGEJO_API_URL",
    "ACTIVITY_CORE_FORGEJO_TOKEN_FILE",
}
README = REPO / "deploy" / "README.md"
FORGEJO_TOKEN = "forgejo-api-token-0a1b2c3d4e5f6789"


def _generated(overlay: str, name: str) -> dict[str, str]:
    """The data of the ConfigMap generated as `name` (kustomize appends a hash)."""
    (found,) = [
        obj["metadata"]["name"]
        for obj in rendered(overlay)
        if obj["kind"] == "ConfigMap"
        and re.fullmatch(rf"{name}-[a-z0-9]+", obj["metadata"]["name"])
    ]
    return config_map(overlay, found)


def _settings_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> ActivityCoreSettings:
    read = {f.alias for f in ActivityCoreSettings.model_fields.values() if f.alias}
    with monkeypatch.context() as patched:
        for name in list(os.environ):
            if name.upper() in read or name.upper().endswith("_FILE"):
                patched.delenv(name)
        for name, value in env.items():
            patched.setenv(name, value)
        return load_activity_core_settings()


# -- the helper ------------------------------------------------------------------------------


def test_publication_secrets_writes_each_token_from_its_file(tmp_path: Path) -> None:
    push = tmp_path / "push-token"
    push.write_text(PUBLICATION_TOKEN + "\n", encoding="utf-8")
    (tmp_path / "one").mkdir()
    done, out = publication_secrets(tmp_path / "one", str(push))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["activity-core-repository"]
    assert (out / "activity-core-repository" / "token").read_bytes() == push.read_bytes()
    assert PUBLICATION_TOKEN not in done.stdout + done.stderr

    api = tmp_path / "api-token"
    api.write_text(FORGEJO_TOKEN, encoding="utf-8")
    (tmp_path / "two").mkdir()
    done, out = publication_secrets(tmp_path / "two", str(push), str(api))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "activity-core-forgejo",
        "activity-core-repository",
    ]
    assert (out / "activity-core-forgejo" / "token").read_bytes() == FORGEJO_TOKEN.encode()
    assert FORGEJO_TOKEN not in done.stdout + done.stderr
    # what activity-core reads back from each file is the token
    assert read_token(str(out / "activity-core-repository" / "token")) == PUBLICATION_TOKEN
    assert read_token(str(out / "activity-core-forgejo" / "token")) == FORGEJO_TOKEN


@pytest.mark.parametrize(
    "content", [None, b"", b"two\nlines\n", b" padded\n"], ids=["missing", "empty", "two", "space"]
)
@pytest.mark.parametrize("which", ["repository", "forgejo"])
def test_publication_secrets_refuses_a_token_file_that_is_not_one_line(
    tmp_path: Path, content: bytes | None, which: str
) -> None:
    good = tmp_path / "good"
    good.write_text(PUBLICATION_TOKEN, encoding="utf-8")
    bad = tmp_path / "bad"
    if content is not None:
        bad.write_bytes(content)
    files = [str(bad)] if which == "repository" else [str(good), str(bad)]
    (tmp_path / "run").mkdir()
    done, out = publication_secrets(tmp_path / "run", *files)
    assert done.returncode == 2
    assert done.stderr == (
        f"{PUBLICATION_SCRIPT}: {bad}: not a readable file holding one line, the token\n"
    )
    assert not out.exists()  # nothing written to the cluster, not even the good one


def test_publication_secrets_refuses_bad_arguments(tmp_path: Path) -> None:
    for argv in ([], ["ops-queue"], ["ops-queue", "a", "b", "c"]):
        done = subprocess.run(
            [str(PUBLICATION_SCRIPT), *argv],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
        )
        assert done.returncode == 2, argv
        assert "usage:" in done.stderr


# -- the manifests ---------------------------------------------------------------------------


def _secret_names(pod: Obj, container: Obj) -> set[str]:
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    return {
        volumes[mount["name"]]["secret"]["secretName"]
        for mount in container.get("volumeMounts", [])
        if "secret" in volumes.get(mount["name"], {})
    }


def _env_names(overlay: str, container: Obj) -> set[str]:
    names = {entry["name"] for entry in container.get("env", [])}
    for source in container.get("envFrom", []):
        names |= set(config_map(overlay, source["configMapRef"]["name"]))
    return names


@pytest.mark.parametrize("overlay", RENDERED)
def test_only_the_temporal_worker_holds_the_publishing_credential(overlay: str) -> None:
    holders = []
    for key, workload in workloads(overlay).items():
        pod = workload["spec"]["template"]["spec"]
        for container in containers(pod):
            where = (*key, container["name"])
            held = _secret_names(pod, container) & PUBLISHING_SECRETS
            settings = _env_names(overlay, container) & REPOSITORY_SETTINGS
            if key == TEMPORAL_WORKER:
                assert held == {"activity-core-repository"}, where
                assert settings == REPOSITORY_SETTINGS - {
                    "ACTIVITY_CORE_FORGEJO_API_URL",
                    "ACTIVITY_CORE_FORGEJO_TOKEN_FILE",
                }, where
                holders.append(where)
            else:
                # the API only starts PublishChangesWorkflow; the workers never publish
                assert not held, where
                assert not settings, where
            if key[1] == "rein-aharness":
                assert all(n.startswith("rein-aharness-") for n in _secret_names(pod, container))
    assert holders == (
        [] if overlay.endswith("release") else [(*TEMPORAL_WORKER, "temporal-worker")]
    )


def _temporal_worker(
    overlay: str, root: Path, secrets: dict[str, dict[str, bytes]]
) -> tuple[Obj, dict[str, str]]:
    workload = workloads(overlay)[TEMPORAL_WORKER]
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    project(overlay, pod, container, root, secrets)
    return container, environment(overlay, "activity-core-temporal-worker-0", container, root)


def _overlay_file(overlay: str) -> dict[str, str]:
    """The KEY=VALUE lines of the app overlay's activity-core-repository.env."""
    own = OVERLAYS / overlay.removesuffix("-monitoring") / "activity-core-repository.env"
    lines = own.read_text(encoding="utf-8").splitlines()
    pairs = [line.split("=", 1) for line in lines if line.strip() and not line.startswith("#")]
    return {key: value for key, value in pairs}


@pytest.mark.parametrize("overlay", APPS)
def test_the_temporal_worker_reads_the_overlays_remote_and_the_secrets_token(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = made_secrets(tmp_path, 1)
    container, env = _temporal_worker(overlay, tmp_path / "pod", secrets)
    assert container["command"] == ["activity-core", "temporal-worker"]
    settings = _settings_env(monkeypatch, env)
    own = _overlay_file(overlay)
    assert settings.repository_url == own["ACTIVITY_CORE_REPOSITORY_URL"]
    assert settings.repository_username == own["ACTIVITY_CORE_REPOSITORY_USERNAME"]
    assert settings.repository_token_file is not None
    assert read_token(str(settings.repository_token_file)) == PUBLICATION_TOKEN
    # no pull requests unless the overlay adds the README's patch (below)
    assert (settings.forgejo_api_url, settings.forgejo_token_file) == (None, None)
    # the same forge as the workers fetch from
    workers = _generated(overlay, "rein-aharness-config")["REIN_AHARNESS_REPOSITORY_URL"]
    assert urlsplit(settings.repository_url).netloc == urlsplit(workers).netloc


@pytest.mark.parametrize("overlay", APPS)
def test_the_git_egress_for_publication_selects_the_temporal_worker_alone(overlay: str) -> None:
    (policy,) = [
        obj
        for obj in rendered(overlay)
        if obj["kind"] == "NetworkPolicy" and obj["metadata"]["name"] == "activity-core-git-egress"
    ]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    selected = [
        key
        for key, workload in workloads(overlay).items()
        if all(
            workload["spec"]["template"]["metadata"]["labels"].get(k) == v
            for k, v in selector.items()
        )
    ]
    assert selected == [TEMPORAL_WORKER]
    assert policy["spec"]["policyTypes"] == ["Egress"]
    url = _generated(overlay, "activity-core-publication")["ACTIVITY_CORE_REPOSITORY_URL"]
    parts = urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}[parts.scheme]
    opened = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert port in opened
    # the same peers as the workers' fetches
    (workers,) = [
        obj
        for obj in rendered(overlay)
        if obj["kind"] == "NetworkPolicy" and obj["metadata"]["name"] == "rein-aharness-git-egress"
    ]
    assert [rule["to"] for rule in policy["spec"]["egress"]] == [
        rule["to"] for rule in workers["spec"]["egress"]
    ]


# -- the README's pull-request patch ----------------------------------------------------------


def _readme_forgejo_patch() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- forgejo-pull-requests -->\n```yaml\n(.*?)```", text, re.S)
    assert found, "deploy/README.md has the Forgejo pull-request patch"
    return found.group(1)


@pytest.mark.parametrize("overlay", APPS)
def test_the_readmes_forgejo_patch_gives_the_temporal_worker_the_api_and_its_token(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the overlay with the README's entries added, as an overlay of it (kustomize takes
    # relative resource paths only)
    patched = tmp_path / "overlay"
    patched.mkdir()
    (patched / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"resources:\n  - {os.path.relpath(OVERLAYS / overlay, patched)}\n"
        + _readme_forgejo_patch(),
        encoding="utf-8",
    )
    secrets = made_secrets(tmp_path, 1)
    api_token = tmp_path / "forgejo-token"
    api_token.write_text(FORGEJO_TOKEN + "\n", encoding="utf-8")
    done, out = publication_secrets(tmp_path, str(tmp_path / "forge-push-token"), str(api_token))
    assert done.returncode == 0, done.stderr
    secrets["activity-core-forgejo"] = {
        "token": (out / "activity-core-forgejo" / "token").read_bytes()
    }

    name = str(patched)
    container, env = _temporal_worker(name, tmp_path / "pod", secrets)
    settings = _settings_env(monkeypatch, env)
    assert settings.forgejo_api_url is not None
    assert settings.forgejo_api_url.startswith("https://")
    assert settings.forgejo_token_file is not None
    assert read_token(str(settings.forgejo_token_file)) == FORGEJO_TOKEN
    assert read_token(str(settings.repository_token_file)) == PUBLICATION_TOKEN
    mount = mounted_at(
        container, str(settings.forgejo_token_file).removeprefix(str(tmp_path / "pod"))
    )
    assert mount is not None and mount.get("readOnly") is True
    # still the Temporal worker alone
    for key, workload in workloads(name).items():
        pod = workload["spec"]["template"]["spec"]
        for other in containers(pod):
            if key != TEMPORAL_WORKER:
                assert not _secret_names(pod, other) & PUBLISHING_SECRETS, key
