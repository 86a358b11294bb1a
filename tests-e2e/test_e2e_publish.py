"""The hand-off end to end: a fire runs on a worker fetching from the team's forge (a real
git smart-HTTP server with authentication), the worker hands its accepted commits to
activity-core as a changes bundle, an operator reads the change over the API (JSON and an
mbox that `git am` applies on the baseline) and publishes it: activity-core's Temporal
worker pushes `rein/<run>/<attempt>` to the forge, whose tip is exactly the run's
`head_after` and descends from the run's baseline. A second publish pushes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from e2e_kit.stack import Stack
from ops_testsupport.git_server import GitServer

SLUG = "e2e-publish"
WORKER = "e2e-publish"
TARGET = "e2e/publish"


def _git(cwd: Path, *args: str, input_bytes: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=e2e", "-c", "user.email=e2e@example.invalid", *args],
        cwd=cwd,
        input=input_bytes,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout.decode().strip()


def _succeeded(stack: Stack) -> asyncpg.Record | None:
    return next((row for row in stack.ops_runs(SLUG) if row["state"] == "succeeded"), None)


def _pushes(forge: GitServer) -> int:
    """receive-pack POSTs the forge served for the repository: one per push."""
    return sum(
        1
        for request in forge.requests_to(TARGET)
        if request.method == "POST" and request.path.endswith("/git-receive-pack")
    )


def _operator(stack: Stack) -> httpx.Client:
    return httpx.Client(
        base_url=stack.url(),
        headers={"Authorization": f"Bearer {stack.config.operator_token}"},
        timeout=30,
    )


def _publication(api: httpx.Client, run_id: str) -> dict[str, Any] | None:
    answer = api.get(f"/ops-runs/{run_id}")
    assert answer.status_code == 200, answer.text
    publication: dict[str, Any] | None = answer.json().get("publication")
    return publication


def test_fire_run_changes_publish_lands_head_after_on_the_forge(
    stack: Stack,
    forge: GitServer,
    tmp_path: Path,
) -> None:
    baseline = forge.create_repository(TARGET, {"README.md": "# e2e/publish\n"})
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    config = dataclasses.replace(
        stack.worker_config(WORKER),
        repositories_root=mirrors,
        repository_url=forge.url_template,
        repository_token_file=forge.write_token_file(tmp_path / "worker-secrets"),
        extra={"REIN_AHARNESS_REPOSITORY_USERNAME": forge.username},
    )
    stack.worker(config, [SLUG])

    # 1. fire -> run: the worker fetched the forge's head and landed its work on it
    stack.fire(SLUG)
    run = stack.wait(lambda: _succeeded(stack), timeout=90, what="the run to succeed")
    run_id = str(run["id"])
    result = json.loads(run["result"])
    head_after = result["head_after"]
    assert result["repository_transaction"]["baseline_digest"] == baseline
    assert result["repository_transaction"]["changes_digest"].startswith("sha256:")

    with _operator(stack) as api:
        # 2. the change is visible: its commits, files and diff, and an mbox for `git am`
        changes = api.get(f"/ops-runs/{run_id}/changes")
        assert changes.status_code == 200, changes.text
        view = changes.json()
        assert view["baseline"] == baseline
        assert view["head_after"] == head_after
        assert view["digest"] == result["repository_transaction"]["changes_digest"]
        assert [commit["sha"] for commit in view["commits"]][-1] == head_after
        assert view["files"], view
        assert all(item["path"].startswith("briefs/") for item in view["files"]), view
        assert all(item["additions"] > 0 for item in view["files"]), view
        patch = api.get(f"/ops-runs/{run_id}/changes.patch")
        assert patch.status_code == 200, patch.text
        clone = tmp_path / "clone"
        _git(tmp_path, "clone", "--quiet", str(forge.root / f"{TARGET}.git"), str(clone))
        _git(clone, "am", "--quiet", input_bytes=patch.content)
        assert _git(clone, "rev-parse", "HEAD^{tree}") == _git(
            mirrors / f"{TARGET}.git", "rev-parse", f"{head_after}^{{tree}}"
        )
        assert _publication(api, run_id) is None
        assert f"rein/{run_id}/1" not in "".join(forge.refs(TARGET))

        # 3. publish: activity-core's Temporal worker pushes the branch to the forge
        pushes = _pushes(forge)
        answer = api.post(f"/ops-runs/{run_id}/publish")
        assert answer.status_code in (200, 202), answer.text
        published = stack.wait(
            lambda: (
                (p := _publication(api, run_id)) is not None
                and p["state"] in ("published", "failed")
                and p
            ),
            timeout=90,
            what="the publication to end",
        )
        assert published["state"] == "published", published
        ref = f"refs/heads/rein/{run_id}/1"
        assert published["ref"] == ref
        assert forge.refs(TARGET)[ref] == head_after
        assert _pushes(forge) == pushes + 1
        _git(clone, "fetch", "--quiet", "origin", f"{ref}:published")
        assert _git(clone, "rev-parse", "published") == head_after
        _git(clone, "merge-base", "--is-ancestor", baseline, "published")
        assert _git(clone, "rev-parse", "published^") == baseline  # the grant's one commit

        # 4. a second publish is published already and pushes nothing
        again = api.post(f"/ops-runs/{run_id}/publish")
        assert again.status_code in (200, 202), again.text
        assert _publication(api, run_id)["state"] == "published"  # type: ignore[index]
        assert _pushes(forge) == pushes + 1
