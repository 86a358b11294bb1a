"""The Secrets the manifests name, made as deploy/README.md says, without a cluster:
deploy/k8s/secrets/worker-secrets.sh and publication-secrets.sh run with kubectl replaced
by a stand-in that records what each `create secret generic` would store, and the
`activity-core` Secret from secrets/activity-core.example.env (`--from-env-file`)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from rendered_pods import REPO

__all__ = [
    "EXAMPLE_ENV",
    "PUBLICATION_SCRIPT",
    "PUBLICATION_TOKEN",
    "REPOSITORY_TOKEN",
    "SCRIPT",
    "made_secrets",
    "publication_secrets",
    "worker_secrets",
]

SCRIPT = REPO / "deploy" / "k8s" / "secrets" / "worker-secrets.sh"
PUBLICATION_SCRIPT = REPO / "deploy" / "k8s" / "secrets" / "publication-secrets.sh"
EXAMPLE_ENV = REPO / "deploy" / "k8s" / "secrets" / "activity-core.example.env"
REPOSITORY_TOKEN = "forge-access-token-0123456789abcdef"
PUBLICATION_TOKEN = "forge-push-token-fedcba9876543210"

FAKE_KUBECTL = """#!/usr/bin/env bash
# -n NS create secret generic NAME --from-file=SRC ... | apply -f -
set -eu
if [ "$1" = apply ]; then cat >/dev/null; exit 0; fi
name=$6
for arg in "$@"; do
  case $arg in --from-file=*) src=${arg#--from-file=} ;; esac
done
mkdir -p "$OUT/$name"
case $src in
  *=*) cp "${src#*=}" "$OUT/$name/${src%%=*}" ;;
  *) cp -R "$src"/. "$OUT/$name/" ;;
esac
"""


def _run_helper(
    directory: Path, script: Path, *argv: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    kubectl = directory / "kubectl"
    kubectl.write_text(FAKE_KUBECTL, encoding="utf-8")
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IXUSR)
    out = directory / "secrets"
    env = {**os.environ, "KUBECTL": str(kubectl), "OUT": str(out)}
    done = subprocess.run(
        [str(script), "ops-queue", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done, out


def worker_secrets(
    directory: Path, replicas: int, *more: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the helper for `replicas` workers (`more`: its optional arguments); what it
    said, and the directory holding each Secret it wrote as `<name>/<key>` files."""
    return _run_helper(directory, SCRIPT, str(replicas), *more)


def publication_secrets(
    directory: Path, *token_files: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run publication-secrets.sh with these token files; what it said, and the directory
    holding each Secret it wrote as `<name>/<key>` files."""
    return _run_helper(directory, PUBLICATION_SCRIPT, *token_files)


def made_secrets(
    directory: Path,
    replicas: int,
    repository_token: str = REPOSITORY_TOKEN,
    publication_token: str = PUBLICATION_TOKEN,
) -> dict[str, dict[str, bytes]]:
    """Every Secret the manifests name, by name and key, as the README makes them (the
    workers' fetch token and activity-core's publishing token each from its own file)."""
    token_file = directory / "forge-token"
    token_file.write_text(repository_token + "\n", encoding="utf-8")
    done, out = worker_secrets(directory, replicas, str(token_file))
    assert done.returncode == 0, done.stderr
    publishing_file = directory / "forge-push-token"
    publishing_file.write_text(publication_token + "\n", encoding="utf-8")
    done, _ = publication_secrets(directory, str(publishing_file))
    assert done.returncode == 0, done.stderr
    secrets = {d.name: {f.name: f.read_bytes() for f in d.iterdir()} for d in out.iterdir()}
    # kubectl create secret generic --from-env-file: KEY=VALUE lines, `#` comments
    lines = EXAMPLE_ENV.read_text(encoding="utf-8").splitlines()
    pairs = [line.split("=", 1) for line in lines if line.strip() and not line.startswith("#")]
    secrets["activity-core"] = {key: value.encode() for key, value in pairs}
    return secrets
