"""Remote mode end to end: the worker (in process) against activity-core on real
PostgreSQL and a real smart-HTTP git server with Basic authentication (`git_server`):
fresh baselines, landed branches that survive fetches and force-pushes, a token that
never reaches an approach, a file or a log, and classified fetch failures."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import pytest

from ac_testkit import OPERATOR_TOKEN, SeededQueue
from ops_testsupport.git_server import GitServer
from rein_aharness.gateway import LocalGlasGateway
from rein_aharness.profiles import load_catalogue
from rein_aharness.repository import (
    FetchFailed,
    RemoteSource,
    ensure_mirror,
    fetch_baseline,
    land,
)
from rein_aharness.repository.mirror import FETCH_NAMESPACE
from rein_aharness.settings import ReinAharnessSettings
from rein_aharness.worker import Transports, WorkerRuntime, open_worker
from rein_worker_kit import (
    FAST,
    GRANT,
    WORKER_BIN,
    ActivityCore,
    RecordingTransport,
    Repos,
    activity_core_app,
    command_profile,
    git,
    served_on_loopback,
    worker_process_env,
    worker_settings,
    write_catalogue,
)

TARGET = "research/briefs"
FILES = {"README.md": "# briefs\n", "briefs/.keep": ""}


def _mirror(repos: Repos) -> Path:
    return repos.root / f"{TARGET}.git"


def _settings(
    tmp_path: Path, repos: Repos, server: GitServer, *profiles: str, **overrides: Any
) -> ReinAharnessSettings:
    catalogue = write_catalogue(tmp_path / "profiles.yaml", *profiles)
    values: dict[str, Any] = {
        "rein_aharness_repository_url": server.url_template,
        "rein_aharness_repository_token_file": server.write_token_file(tmp_path / "secrets"),
        "rein_aharness_repository_username": server.username,
        "rein_aharness_fetch_timeout_seconds": 20,
    }
    values.update(overrides)
    return worker_settings(tmp_path, repos, catalogue, **values)


@asynccontextmanager
async def _worker(
    settings: ReinAharnessSettings, activity_core: ActivityCore
) -> AsyncIterator[WorkerRuntime]:
    assert settings.rein_aharness_profiles is not None
    transport = RecordingTransport(activity_core.transport())
    async with open_worker(
        settings,
        load_catalogue(settings.rein_aharness_profiles),
        transports=Transports(queue=transport),
        retry=FAST,
    ) as runtime:
        yield runtime


async def _brief_run(activity_core: ActivityCore, target_repo: str = TARGET) -> uuid.UUID:
    return await activity_core.seeded.run(
        harness_profile_ref="harness.brief@1.0.0", repository_grant=GRANT, target_repo=target_repo
    )


def _no_worktrees(tmp_path: Path, repos: Repos) -> None:
    worktrees = tmp_path / "state" / "worktrees"
    assert not worktrees.exists() or list(worktrees.iterdir()) == []
    mirror = _mirror(repos)
    if mirror.exists():
        assert len(Repos.worktrees(mirror)) == 1  # the bare mirror itself


async def _explained(activity_core: ActivityCore, run_id: uuid.UUID) -> str:
    """The details of activity-core's explain view for the run, joined."""
    async with httpx.AsyncClient(
        transport=activity_core.transport(), base_url="http://ac.test"
    ) as http:
        response = await http.get(
            f"/ops-runs/{run_id}/explain", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        )
    assert response.status_code == 200, response.text
    return " | ".join(reason["detail"] for reason in response.json()["reasons"])


def _failures(runtime: WorkerRuntime, reason: str) -> float:
    value = runtime.metrics.registry.get_sample_value(
        "ops_worker_execution_failures_total", {"reason": reason}
    )
    assert value is not None
    return value


# -- fresh baselines -------------------------------------------------------------------


async def test_each_run_starts_from_the_remote_head_and_landed_branches_survive(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, git_server: GitServer
) -> None:
    first_head = git_server.create_repository(TARGET, FILES)
    settings = _settings(tmp_path, repos, git_server)
    landed: dict[str, str] = {}

    async def one_run(expected_baseline: str) -> None:
        run_id = await _brief_run(activity_core)
        async with _worker(settings, activity_core) as runtime:
            await runtime.worker.run(once=True)
        row = await activity_core.row(run_id)
        assert row["state"] == "succeeded", row["last_error"]
        transaction = row["result"]["repository_transaction"]
        assert transaction["baseline_digest"] == expected_baseline
        [commit] = transaction["accepted_commits"]
        branch = f"refs/heads/rein/{run_id}/1"
        assert git(_mirror(repos), "rev-parse", f"{branch}^") == expected_baseline
        landed[branch] = commit

    await one_run(first_head)
    second_head = git_server.push_commit(TARGET, {"briefs/upstream.md": "new\n"})
    await one_run(second_head)
    rewritten = git_server.force_push(TARGET, {"README.md": "# rewritten\n", "briefs/.keep": ""})
    await one_run(rewritten)

    assert git(_mirror(repos), "merge-base", "--is-ancestor", first_head, second_head) == ""
    refs = Repos.refs(_mirror(repos)).splitlines()
    # Every landed branch where it landed; the fetched ref at the rewritten head; no other.
    assert dict(line.split(" ") for line in refs) == {
        **landed,
        f"{FETCH_NAMESPACE}main": rewritten,
    }
    # The worker never pushed: the server has its own branch only.
    assert git_server.refs(TARGET) == {"refs/heads/main": rewritten}
    # It logged in with the token, for the fetches only.
    served = git_server.requests_to(TARGET)
    assert served and {r.user for r in served if r.status == 200} == {git_server.username}
    _no_worktrees(tmp_path, repos)


# -- the token stays with the worker's git ---------------------------------------------


def _searching_approach(token: str) -> str:
    """A command that looks for the token in its environment, every readable file
    outside /usr and /proc's environ, cmdline files, and fails (status 3) if it finds
    it; else commits a brief. The token is split in its argv, so the script itself (in
    /proc/self/cmdline) does not contain it whole."""
    half = len(token) // 2
    return (
        f"A='{token[:half]}'; B='{token[half:]}'; T=\"$A$B\"; found=''; "
        'env | grep -qF -- "$T" && found="$found env"; '
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
        'grep -qaF -- "$T" "$f" 2>/dev/null && found="$found $f"; done; '
        'grep -rlaF -- "$T" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev '
        '--exclude-dir=usr 2>/dev/null | grep -q . && found="$found files"; '
        'if [ -n "$found" ]; then echo "FOUND:$found"; exit 3; fi; '
        "echo clean > briefs/clean.md && git add -A && git commit -qm clean"
    )


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    found = []
    for directory, _dirs, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if path.is_symlink() or not path.is_file():
                continue
            if needle in path.read_bytes():
                found.append(path)
    return found


async def test_the_token_reaches_no_approach_file_or_log(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    git_server: GitServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    git_server.create_repository(TARGET, FILES)
    token = git_server.token
    settings = _settings(
        tmp_path, repos, git_server, command_profile("search", _searching_approach(token))
    )
    run_id = await activity_core.granted_run("search")
    with caplog.at_level(logging.DEBUG, logger="rein_aharness"):
        async with _worker(settings, activity_core) as runtime:
            await runtime.worker.run(once=True)

    row = await activity_core.row(run_id)
    # Status 3 would mean the approach found it; success means it searched and did not.
    assert row["state"] == "succeeded", row["last_error"]
    # The fetch did authenticate with it (so it existed somewhere the worker's git read).
    assert any(r.user == git_server.username for r in git_server.requests_to(TARGET))
    needle = token.encode()
    assert _files_holding(tmp_path / "state", needle) == []
    assert _files_holding(repos.root, needle) == []
    logged = "\n".join(f"{record.getMessage()} {record.__dict__}" for record in caplog.records)
    assert "command finished" in logged  # the debug lines were captured
    assert token not in logged and token not in str(row["result"])
    # The worker's own environment never held it either (only the file's path).
    assert token not in "\n".join(os.environ.values())


async def test_a_worker_process_logs_no_token_at_debug(
    db_dsn: str,
    db: asyncpg.Connection,
    repos: Repos,
    tmp_path: Path,
    git_server: GitServer,
) -> None:
    """`rein-aharness run` as a real process, at DEBUG: one run lands, one fails on a
    refused login, one on an unavailable remote; no line of its output has the token."""
    git_server.create_repository(TARGET, FILES)
    seeded = SeededQueue(db)
    catalogue = write_catalogue(tmp_path / "profiles.yaml")
    token_file = git_server.write_token_file(tmp_path / "secrets")
    log = tmp_path / "worker.log"
    async with served_on_loopback(activity_core_app(db_dsn)) as url:
        env = worker_process_env(tmp_path, repos, catalogue, url, lease_seconds=30)
        env.update(
            REIN_AHARNESS_REPOSITORY_URL=git_server.url_template,
            REIN_AHARNESS_REPOSITORY_TOKEN_FILE=str(token_file),
            REIN_AHARNESS_REPOSITORY_USERNAME=git_server.username,
            REIN_AHARNESS_FETCH_TIMEOUT_SECONDS="5",
            REIN_AHARNESS_LOG_LEVEL="DEBUG",
        )
        states = []
        for switch in ("none", "refuse_credentials", "status"):
            git_server.refuse_credentials = switch == "refuse_credentials"
            git_server.status = 503 if switch == "status" else None
            run_id = await seeded.run(
                harness_profile_ref="harness.brief@1.0.0", repository_grant=GRANT
            )
            with log.open("ab") as out:
                done = await anyio.run_process(
                    [str(WORKER_BIN), "run", "--once"],
                    env=env,
                    stdout=out,
                    stderr=out,
                    check=False,
                )
            assert done.returncode == 0, log.read_text()[-2000:]
            row = await seeded.row(run_id)
            states.append((row["state"], (row["last_error"] or "").split(":")[0]))
    assert states == [
        ("succeeded", ""),
        ("failed", "repository_credentials_refused"),
        ("open", "repository_unavailable"),
    ]
    text = log.read_text()
    # The failures were logged, with their reasons (so the lines searched are there).
    assert '"reason":"repository_credentials_refused: ' in text
    assert '"reason":"repository_unavailable: ' in text
    assert git_server.token not in text
    needle = git_server.token.encode()
    assert _files_holding(tmp_path / "state", needle) == []
    assert _files_holding(repos.root, needle) == []


# -- classified failures -----------------------------------------------------------------


@pytest.mark.parametrize("fault", ["drop_fetch", "stall_fetch", "status_503", "unreachable"])
async def test_an_unavailable_remote_reopens_the_attempt_and_the_worker_goes_on(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    git_server: GitServer,
    fault: str,
) -> None:
    git_server.create_repository(TARGET, FILES)
    overrides: dict[str, Any] = {"rein_aharness_fetch_timeout_seconds": 2}
    if fault == "unreachable":
        overrides["rein_aharness_repository_url"] = "http://127.0.0.1:9/{target_repo}.git"
    settings = _settings(tmp_path, repos, git_server, **overrides)
    run_id = await _brief_run(activity_core)
    async with _worker(settings, activity_core) as runtime:
        if fault == "drop_fetch":
            git_server.drop_fetch = True
        elif fault == "stall_fetch":
            git_server.stall_fetch = 30.0
        elif fault == "status_503":
            git_server.status = 503
        await runtime.worker.run(once=True)

        row = await activity_core.row(run_id)
        assert row["state"] == "open", row["last_error"]
        assert row["last_error"].startswith("repository_unavailable: "), row["last_error"]
        if fault == "stall_fetch":
            assert "timed out after 2 s" in row["last_error"]
        assert "the last error: repository_unavailable: " in await _explained(activity_core, run_id)
        assert _failures(runtime, "repository_unavailable") == 1
        _no_worktrees(tmp_path, repos)

        # The same worker claims again; with the remote healthy the reopened run lands.
        git_server.drop_fetch, git_server.stall_fetch, git_server.status = False, None, None
        if fault != "unreachable":
            await runtime.worker.run(once=True)
            row = await activity_core.row(run_id)
            assert (row["state"], row["attempt"]) == ("succeeded", 2), row["last_error"]
            _no_worktrees(tmp_path, repos)
    assert git_server.token not in str(row["last_error"])


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("refuse_credentials", "repository_credentials_refused: "),
        ("wrong_token", "repository_credentials_refused: "),
        ("unknown_repository", "repository_not_found: "),
    ],
)
async def test_refused_credentials_and_unknown_repositories_fail_without_reopen(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    git_server: GitServer,
    fault: str,
    reason: str,
) -> None:
    git_server.create_repository(TARGET, FILES)
    settings = _settings(tmp_path, repos, git_server)
    target = "research/missing" if fault == "unknown_repository" else TARGET
    if fault == "refuse_credentials":
        git_server.refuse_credentials = True
    elif fault == "wrong_token":
        assert settings.rein_aharness_repository_token_file is not None
        settings.rein_aharness_repository_token_file.write_text("not-the-token\n")
    run_id = await _brief_run(activity_core, target)
    async with _worker(settings, activity_core) as runtime:
        await runtime.worker.run(once=True)
        row = await activity_core.row(run_id)
        assert row["state"] == "failed"
        assert row["last_error"].startswith(reason), row["last_error"]
        assert f"will not run again: {reason}" in await _explained(activity_core, run_id)
        assert _failures(runtime, reason.removesuffix(": ")) == 1
        [report] = runtime.worker.reports
        assert report.close is not None and report.close.disposition == "applied"
    assert git_server.token not in row["last_error"]
    assert (tmp_path / "state" / "worktrees").exists() is False or not list(
        (tmp_path / "state" / "worktrees").iterdir()
    )


# -- the legacy table fetches the same way --------------------------------------------------

_LEGACY = (
    "legacy_approaches:\n"
    "  legacy-ok:\n"
    "    approach: command\n"
    '    command: {argv: ["sh", "-c", "test -f briefs/upstream.md"], timeout_s: 30, '
    "env_allowlist: [PATH]}\n"
    "    sandbox_profile: profile.bwrap-local\n"
)


async def test_a_legacy_row_runs_on_the_fetched_head_and_fails_like_a_profiled_one(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, git_server: GitServer
) -> None:
    git_server.create_repository(TARGET, FILES)
    head = git_server.push_commit(TARGET, {"briefs/upstream.md": "new\n"})
    settings = _settings(tmp_path, repos, git_server)
    write_catalogue(tmp_path / "profiles.yaml", legacy=_LEGACY)
    first = await activity_core.seeded.run(harness_profile_ref=None, approach_hint="legacy-ok")
    async with _worker(settings, activity_core) as runtime:
        await runtime.worker.run(once=True)
        row = await activity_core.row(first)
        assert row["state"] == "succeeded", row["last_error"]
        assert row["result"]["head_after"] == head  # it ran at the fetched commit

        git_server.status = 503
        second = await activity_core.seeded.run(harness_profile_ref=None, approach_hint="legacy-ok")
        await runtime.worker.run(once=True)
        row = await activity_core.row(second)
        assert row["state"] == "open"
        assert row["last_error"].startswith("repository_unavailable: "), row["last_error"]
        assert _failures(runtime, "repository_unavailable") == 1
    _no_worktrees(tmp_path, repos)


async def test_a_withdrawn_landing_is_removed_from_the_mirror_only(
    repos: Repos, tmp_path: Path, git_server: GitServer
) -> None:
    head = git_server.create_repository(TARGET, FILES)
    source = _source(git_server, tmp_path)
    mirror = await ensure_mirror(repos.root, TARGET)
    assert await fetch_baseline(mirror, source) == head
    await land(mirror, head, "run-1", 1)
    # A checkout of the same name beside the mirror (single-host leftovers) is not it.
    checkout = repos.make(TARGET)
    git(checkout, "branch", "rein/run-1/1")
    gateway = LocalGlasGateway(
        repositories_root=repos.root, worktrees_root=tmp_path / "worktrees", source=source
    )
    await gateway.withdraw(TARGET, "run-1", 1)
    assert Repos.landings(mirror.path) == {}
    assert list(Repos.landings(checkout)) == ["refs/heads/rein/run-1/1"]


# -- bounds and concurrency, at the mirror ---------------------------------------------------


def _source(server: GitServer, tmp_path: Path, **fields: Any) -> RemoteSource:
    return RemoteSource(
        server.url_template,
        token_file=server.write_token_file(tmp_path / "secrets"),
        username=server.username,
        **fields,
    )


async def test_a_fetch_over_the_bound_is_stopped_and_the_mirror_stays_usable(
    repos: Repos, tmp_path: Path, git_server: GitServer
) -> None:
    first = git_server.create_repository(TARGET, FILES)
    bounded = _source(git_server, tmp_path, max_bytes=1 << 20)
    mirror = await ensure_mirror(repos.root, TARGET)
    assert await fetch_baseline(mirror, bounded) == first
    packs = sorted(os.listdir(mirror.common_dir / "objects" / "pack"))
    large = git_server.push_large(TARGET, 16)

    with pytest.raises(FetchFailed) as failed:
        await fetch_baseline(mirror, bounded)
    assert failed.value.kind == "too_large"
    assert failed.value.reason.startswith("repository_too_large: ")
    assert sorted(os.listdir(mirror.common_dir / "objects" / "pack")) == packs
    assert git(mirror.path, "rev-parse", f"{FETCH_NAMESPACE}main") == first

    assert await fetch_baseline(mirror, _source(git_server, tmp_path)) == large
    git(mirror.path, "fsck", "--strict", "--no-dangling")


async def test_an_oversized_fetch_is_killed_while_it_runs(
    repos: Repos, tmp_path: Path, git_server: GitServer
) -> None:
    """Not only undone afterwards: the mirror's packs never grow far past the bound."""
    git_server.create_repository(TARGET, FILES)
    mirror = await ensure_mirror(repos.root, TARGET)
    await fetch_baseline(mirror, _source(git_server, tmp_path))
    git_server.push_large(TARGET, 64)
    packs = mirror.common_dir / "objects" / "pack"

    def size() -> int:
        return sum(entry.stat().st_size for entry in os.scandir(packs) if entry.is_file())

    start, largest = size(), 0
    failure: list[FetchFailed] = []
    done = anyio.Event()

    async def fetch() -> None:
        try:
            await fetch_baseline(mirror, _source(git_server, tmp_path, max_bytes=1 << 20))
        except FetchFailed as exc:
            failure.append(exc)
        finally:
            done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(fetch)
        while not done.is_set():
            with contextlib.suppress(OSError):
                largest = max(largest, size() - start)
            await anyio.sleep(0.005)
    assert [f.kind for f in failure] == ["too_large"]
    assert largest < 24 << 20, f"the packs grew by {largest >> 20} MB before the kill"
    assert size() == start


_FETCHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import anyio
    from rein_aharness.repository import RemoteSource, ensure_mirror, fetch_baseline

    async def main() -> None:
        root, template, token_file, user = sys.argv[1:5]
        source = RemoteSource(template, token_file=Path(token_file), username=user)
        for _ in range(3):
            mirror = await ensure_mirror(Path(root), "research/briefs")
            print(await fetch_baseline(mirror, source), flush=True)

    anyio.run(main)
    """
)


def test_two_processes_fetching_one_mirror_over_http_do_not_corrupt_it(
    repos: Repos, tmp_path: Path, git_server: GitServer
) -> None:
    git_server.create_repository(TARGET, FILES)
    head = ""
    for index in range(10):
        head = git_server.push_commit(TARGET, {f"briefs/{index}.md": os.urandom(4096).hex()})
    token_file = git_server.write_token_file(tmp_path / "secrets")
    argv = [
        sys.executable,
        "-c",
        _FETCHER,
        str(repos.root),
        git_server.url_template,
        str(token_file),
        git_server.username,
    ]
    children = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        assert out.split() == [head] * 3
    mirror = _mirror(repos)
    git(mirror, "fsck", "--strict", "--no-dangling")
    assert git(mirror, "for-each-ref", "--format=%(refname) %(objectname)") == (
        f"{FETCH_NAMESPACE}main {head}"
    )
    assert not [n for n in os.listdir(mirror / "objects" / "pack") if n.startswith("tmp_")]
