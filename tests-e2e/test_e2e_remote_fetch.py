"""Remote mode end to end: a worker whose repositories come from a real git server (smart
HTTP with authentication, `ops_testsupport.git_server`), reached through a TCP proxy the
test can cut. Each attempt fetches the remote's default branch into the worker's mirror
before any worktree exists and starts from the fetched commit:

- a fire runs from the remote's head and lands `rein/<run>/1` (in the mirror) on top of it;
- the remote moves on; the next fire's first attempt loses its connection mid-fetch (the
  proxy cut while the server holds the fetch), its second stalls past
  REIN_AHARNESS_FETCH_TIMEOUT_SECONDS: both are reopened as `repository_unavailable` with no
  worktree left, and the third lands on the remote's new head; the first run's branch
  stays;
- the token is in no log line, no file of the worker's state or mirror, and in no argv.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import asyncpg

from e2e_kit.git import landing_branches
from e2e_kit.stack import Stack, delivered_closes, outbox
from e2e_kit.tcp_proxy import TcpProxy
from ops_demo.repository import git
from ops_testsupport.git_server import GitServer

SLUG = "e2e-remote"
WORKER = "e2e-remote"
TARGET = "e2e/remote"
FETCH_TIMEOUT_SECONDS = 3


def _fetches_started(server: GitServer) -> int:
    """Authenticated ref advertisements served: each fetch's first step (its ls-remote);
    the POST that follows is the one `stall_fetch` holds."""
    return sum(
        1
        for request in server.requests_to(TARGET)
        if request.method == "GET" and request.status == 200 and request.user is not None
    )


def _succeeded(stack: Stack, run_id: str | None = None) -> asyncpg.Record | None:
    return next(
        (
            row
            for row in stack.ops_runs(SLUG)
            if row["state"] == "succeeded" and (run_id is None or str(row["id"]) == run_id)
        ),
        None,
    )


def _files_holding(directory: Path, secret: bytes) -> list[Path]:
    found = []
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if secret in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def test_runs_start_from_the_remotes_current_head_and_a_broken_fetch_is_reopened(
    stack: Stack,
    git_server: GitServer,
    tmp_path: Path,
) -> None:
    first_head = git_server.create_repository(TARGET, {"README.md": "# e2e/remote\n"})
    port = int(git_server.base_url.rsplit(":", 1)[1])
    proxy = TcpProxy("127.0.0.1", port)
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    config = dataclasses.replace(
        stack.worker_config(WORKER),
        repositories_root=mirrors,
        repository_url=f"http://127.0.0.1:{proxy.port}/{{target_repo}}.git",
        repository_token_file=git_server.write_token_file(secrets),
        extra={
            "REIN_AHARNESS_REPOSITORY_USERNAME": git_server.username,
            "REIN_AHARNESS_FETCH_TIMEOUT_SECONDS": str(FETCH_TIMEOUT_SECONDS),
        },
    )
    worker = stack.worker(config, [SLUG])
    mirror = mirrors / f"{TARGET}.git"
    try:
        # 1. a fire: fetched, run from the remote's head, landed on top of it
        stack.fire(SLUG)
        first = stack.wait(lambda: _succeeded(stack), timeout=60, what="the first run")
        first_id = str(first["id"])
        first_result = json.loads(first["result"])
        first_landing = f"rein/{first_id}/1"
        assert git(mirror, "rev-parse", f"{first_landing}^") == first_head
        assert git(mirror, "rev-parse", first_landing) == first_result["head_after"]

        # 2. the remote moves on; the next fire's fetches break twice, then work
        second_head = git_server.push_commit(TARGET, {"docs/upstream.md": "moved on\n"})
        fetches = _fetches_started(git_server)
        git_server.stall_fetch = 60.0
        stack.fire(SLUG)
        stack.wait(
            lambda: _fetches_started(git_server) > fetches,
            timeout=30,
            what="attempt 1's fetch to start",
        )
        time.sleep(0.5)  # its POST is held by the server now
        proxy.cut()  # the connection drops mid-fetch
        proxy.restore()
        fetches = _fetches_started(git_server)
        stack.wait(
            lambda: _fetches_started(git_server) > fetches,
            timeout=30,
            what="attempt 2's fetch to start (the run reopened and claimed again)",
        )
        time.sleep(0.5)  # held past the fetch timeout ...
        git_server.stall_fetch = None  # ... and attempt 3's fetch is answered
        rows = [r for r in stack.ops_runs(SLUG) if str(r["id"]) != first_id]
        assert len(rows) == 1
        second_id = str(rows[0]["id"])
        second = stack.wait(
            lambda: _succeeded(stack, second_id), timeout=60, what="the second run's attempt 3"
        )
    finally:
        git_server.stall_fetch = None
        proxy.close()

    assert second["attempt"] == 3
    pending, delivered = outbox(config.state_dir).for_run(second_id)
    assert pending == []
    closes = delivered_closes(delivered)
    assert closes == [
        (f"rtx-{second_id}.1", "fail", True, "reopened"),
        (f"rtx-{second_id}.2", "fail", True, "reopened"),
        (f"rtx-{second_id}.3", "complete", False, "applied"),
    ], closes
    errors = {e["transaction_id"]: e["intent"].get("error", "") for e in delivered}
    assert errors[f"rtx-{second_id}.1"].startswith("repository_unavailable"), errors
    assert errors[f"rtx-{second_id}.2"].startswith("repository_unavailable"), errors
    assert "timed out" in errors[f"rtx-{second_id}.2"], errors

    # the third attempt started from the remote's new head; nothing else landed
    result = json.loads(second["result"])
    second_landing = f"rein/{second_id}/3"
    assert git(mirror, "rev-parse", f"{second_landing}^") == second_head
    assert git(mirror, "rev-parse", "refs/remotes/origin/main") == second_head
    assert landing_branches(mirror) == {
        first_landing: first_result["head_after"],
        second_landing: result["head_after"],
    }
    # no worktree left behind by the failed attempts
    worktrees = config.state_dir / "worktrees"
    assert not worktrees.exists() or list(worktrees.iterdir()) == []
    # the remote was only read
    assert not any(ref.startswith("refs/heads/rein/") for ref in git_server.refs(TARGET))

    # the token: in no log line, no file of the worker's, no process's argv
    token = git_server.token.encode()
    assert token not in worker.log_text().encode()
    assert _files_holding(config.state_dir, token) == []
    assert _files_holding(mirrors, token) == []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            assert token not in argv, pid
