"""deploy/k8s/secrets/worker-secrets.sh writes tokens and digests that the services accept.

kubectl is replaced by a stand-in that records what each `create secret generic` would
store, so the test needs no cluster: the per-pod token files must be what rein-aharness
reads (one line, a valid token), and credentials.json must load in activity-core and bind
each pod's worker id to exactly that pod's token.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from activity_core.http.auth import load_worker_credentials, token_digest
from rein_aharness.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "k8s" / "secrets" / "worker-secrets.sh"

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


def test_worker_secrets_bind_each_pod_to_its_own_token(tmp_path: Path) -> None:
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE_KUBECTL, encoding="utf-8")
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "secrets"
    env = {**os.environ, "KUBECTL": str(kubectl), "OUT": str(out)}

    done = subprocess.run(
        [str(SCRIPT), "ops-queue", "3"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr

    tokens = {
        p.name: p.read_text(encoding="utf-8")
        for p in (out / "rein-aharness-worker-tokens").iterdir()
    }
    assert sorted(tokens) == ["rein-aharness-0", "rein-aharness-1", "rein-aharness-2"]
    assert len(set(tokens.values())) == 3
    for token in tokens.values():
        assert token not in done.stdout + done.stderr
        # what the StatefulSet's `read -r` hands to rein-aharness
        settings = Settings(activity_core_worker_token=token)
        assert settings.activity_core_worker_token is not None
        assert len(token) >= 16

    credentials = out / "activity-core-worker-credentials" / "credentials.json"
    workers = load_worker_credentials(credentials)
    assert workers == {pod: token_digest(token) for pod, token in tokens.items()}


def test_worker_secrets_refuses_bad_arguments(tmp_path: Path) -> None:
    for argv in ([], ["ops-queue"], ["ops-queue", "0"], ["ops-queue", "two"]):
        done = subprocess.run(
            [str(SCRIPT), *argv], capture_output=True, text=True, check=False, cwd=tmp_path
        )
        assert done.returncode == 2, argv
        assert "usage:" in done.stderr
