"""The worker against activity-core in-process on real PostgreSQL and real git repositories."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from ops_contracts import acceptance_policy_id, grant_id, parse_repository_grant
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.outbox import OutboxStore
from rein_aharness.profiles import load_catalogue
from rein_aharness.settings import ReinAharnessSettings
from rein_aharness.worker import Transports, open_worker
from rein_worker_kit import (
    FAST,
    GRANT,
    UNCONFINED,
    ActivityCore,
    RecordingTransport,
    Repos,
    RunCommand,
    command_profile,
    git,
    glas_evidence,
    outbox,
    pending_complete,
    run_worker_once,
    started_in_a_worktree,
    worker_settings,
    write_catalogue,
)

FAST_ONCE = RetryPolicy(attempts=1, initial_wait=0, max_wait=0)


def _no_worktrees_left(tmp_path: Path, repo: Path) -> None:
    worktrees = tmp_path / "state" / "worktrees"
    assert not worktrees.exists() or list(worktrees.iterdir()) == []
    assert len(Repos.worktrees(repo)) == 1  # only the main checkout


async def test_brief_run_completes_inside_the_grant_and_lands_on_its_branch(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repo = repos.make()
    head_before = Repos.refs(repo)
    run_id = await activity_core.seeded.run(
        harness_profile_ref="harness.brief@1.0.0",
        repository_grant=GRANT,
        execution_refs={"correlation_id": "corr-1", "goal_refs": ["goal-1"]},
    )
    settings = worker_settings(tmp_path, repos)
    transport = RecordingTransport(activity_core.transport())

    with caplog.at_level(logging.INFO, logger="rein_aharness.events"):
        runtime = await run_worker_once(settings, transport)

    [report] = runtime.worker.reports
    assert report.close is not None
    assert (report.close.path, report.close.state, report.close.disposition) == (
        "outbox",
        "delivered",
        "applied",
    )
    row = await activity_core.row(run_id)
    assert row["state"] == "succeeded"
    result = row["result"]
    grant = parse_repository_grant(GRANT)
    transaction = result["repository_transaction"]
    assert transaction["grant_id"] == grant_id(grant)
    assert transaction["acceptance_policy_id"] == acceptance_policy_id(grant)
    assert transaction["acceptance"] == "accepted"
    assert transaction["transaction_id"] == f"rtx-{run_id}.1"
    assert transaction["correlation_id"] == "corr-1"
    [commit] = transaction["accepted_commits"]
    [path] = transaction["accepted_paths"]
    assert path.startswith("briefs/") and path.endswith(f"-{run_id}.md")
    assert result["ok"] is True and result["committed"] is True
    assert result["path"] == path and result["head_after"] == commit
    assert result["target_repo"] == "research/briefs"
    evidence = result["execution_evidence"]
    assert evidence["profile_ref"] == "harness.brief@1.0.0"
    assert evidence["outcome"] == "succeeded"
    assert evidence["rein_id"] == "rein-aharness"
    assert evidence["refs"] == {"correlation_id": "corr-1", "goal_refs": ["goal-1"]}

    # landed on its own branch; the checked-out branch and working tree are untouched
    assert Repos.landings(repo) == {f"refs/heads/rein/{run_id}/1": commit}
    assert Repos.refs_outside_landings(repo) == head_before
    assert Repos.status(repo) == ""
    _no_worktrees_left(tmp_path, repo)
    content = git(repo, "show", f"{commit}:{path}") + "\n"
    assert content.startswith("# run 1\n\nseeded by a test\n")

    # the close went through the outbox; the event was logged once
    snapshot = outbox(settings).snapshot()
    assert snapshot.pending == () and snapshot.delivered_count == 1
    events = [json.loads(r.getMessage()) for r in caplog.records if r.name.endswith("events")]
    assert [(e["event"], e["run_id"], e["close_disposition"]) for e in events] == [
        ("test_activity", str(run_id), "applied")
    ]
    assert events[0]["result"]["path"] == path
    assert transport.calls[0] == "POST /ops-runs/claim"


# -- replay before claim -------------------------------------------------------------------


@dataclass
class Backlog:
    """A worker's state after a crash: `earlier` is claimed by it, its complete pending
    in `store`; `later` is open. `transport` is the worker's, to activity-core."""

    settings: ReinAharnessSettings
    store: OutboxStore
    earlier: uuid.UUID
    later: uuid.UUID
    transport: RecordingTransport


@pytest.fixture
async def backlog(activity_core: ActivityCore, repos: Repos, tmp_path: Path) -> Backlog:
    repos.make()
    settings = worker_settings(tmp_path, repos)
    earlier = await activity_core.seeded.run(labels=["earlier"], harness_profile_ref=None)
    claimed = await activity_core.claim_as_worker("earlier")
    assert [run["id"] for run in claimed] == [str(earlier)]
    store = outbox(settings)
    pending_complete(store, earlier)
    later = await activity_core.granted_run("brief")
    transport = RecordingTransport(activity_core.transport())
    return Backlog(settings, store, earlier, later, transport)


async def test_pending_closes_are_replayed_before_anything_is_claimed(
    activity_core: ActivityCore, backlog: Backlog
) -> None:
    transport = backlog.transport

    await run_worker_once(backlog.settings, transport)

    earlier = backlog.earlier
    assert transport.calls[:2] == [f"POST /ops-runs/{earlier}/complete", "POST /ops-runs/claim"]
    assert (await activity_core.row(earlier))["state"] == "succeeded"
    assert (await activity_core.row(backlog.later))["state"] == "succeeded"
    assert backlog.store.snapshot().pending == ()


async def test_nothing_is_claimed_while_an_outage_keeps_the_outbox_from_draining(
    activity_core: ActivityCore, backlog: Backlog
) -> None:
    transport = backlog.transport

    async def unreachable(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/complete"):
            raise httpx.ConnectError("connection refused", request=request)
        return None

    transport.before = unreachable
    await run_worker_once(backlog.settings, transport)

    assert transport.paths("/claim") == []
    assert len(transport.paths("/complete")) == 2  # the bounded retry, then the pass stops
    [pending] = backlog.store.snapshot().pending
    assert (pending.run_id, pending.attempts, pending.last_failure_class) == (
        str(backlog.earlier),
        1,
        "QueueTransportError",
    )
    assert (await activity_core.row(backlog.later))["state"] == "open"


# -- heartbeats ------------------------------------------------------------------------------


async def test_a_refused_heartbeat_cancels_the_execution_and_closes_nothing(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    refs_before = Repos.refs(repo)
    late = tmp_path / "late-marker"
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml",
        command_profile("slow", f"echo started; sleep 20; touch {late}"),
    )
    settings = worker_settings(tmp_path, repos, catalogue, rein_aharness_lease_seconds=3)
    run_id = await activity_core.granted_run("slow")
    transport = RecordingTransport(activity_core.transport())

    async def lease_ends_first(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/heartbeat"):
            await activity_core.seeded.expire_lease(run_id)
        return None

    transport.before = lease_ends_first
    runtime = await run_worker_once(settings, transport)

    [report] = runtime.worker.reports
    assert report.close is None
    assert report.lease_lost == "heartbeat refused: expired_lease"
    assert len(transport.paths("/heartbeat")) == 1
    assert transport.paths("/complete") == [] and transport.paths("/fail") == []
    row = await activity_core.row(run_id)
    assert (row["state"], row["result"], row["last_error"]) == ("claimed", None, None)
    snapshot = outbox(settings).snapshot()
    assert snapshot.pending == () and snapshot.delivered_count == 0
    assert not late.exists()  # the command was killed, not left running
    assert Repos.refs(repo) == refs_before
    _no_worktrees_left(tmp_path, repo)


async def test_heartbeats_keep_a_long_run_alive(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml",
        command_profile(
            "steady", "sleep 2.5; echo x > briefs/steady.md; git add -A; git commit -qm steady"
        ),
    )
    settings = worker_settings(tmp_path, repos, catalogue, rein_aharness_lease_seconds=3)
    run_id = await activity_core.granted_run("steady")
    transport = RecordingTransport(activity_core.transport())

    await run_worker_once(settings, transport)

    assert len(transport.paths("/heartbeat")) >= 2
    row = await activity_core.row(run_id)
    assert row["state"] == "succeeded"
    assert row["result"]["repository_transaction"]["accepted_paths"] == ["briefs/steady.md"]
    assert list(Repos.landings(repo)) == [f"refs/heads/rein/{run_id}/1"]


async def test_a_claim_that_took_most_of_its_lease_is_renewed_before_anything_executes(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml",
        command_profile("quick", "echo x > briefs/quick.md; git add -A; git commit -qm quick"),
    )
    settings = worker_settings(tmp_path, repos, catalogue, rein_aharness_lease_seconds=3)
    run_id = await activity_core.granted_run("quick")
    transport = RecordingTransport(activity_core.transport())

    async def long_poll(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/claim"):
            # as a long-poll that found its run only now: activity-core grants the lease
            # after this, while the worker counts it from the sending (3 s ago, > lease)
            await anyio.sleep(3)
        return None

    transport.before = long_poll
    runtime = await run_worker_once(settings, transport)

    [report] = runtime.worker.reports
    assert report.lease_lost is None
    # the lease was renewed before the approach ran (later heartbeats, if the approach
    # outlasts an interval on a loaded machine, come after it)
    calls = [call.rsplit("/", 1)[-1] for call in transport.calls]
    assert calls[:2] == ["claim", "heartbeat"] and calls[-1] == "complete", calls
    assert (await activity_core.row(run_id))["state"] == "succeeded"
    assert list(Repos.landings(repo)) == [f"refs/heads/rein/{run_id}/1"]


# -- profile refusal -------------------------------------------------------------------------


def _legacy_table(
    marker: Path, script: str | None = None, *, sandbox: str = "profile.bwrap-local"
) -> str:
    command = json.dumps(["sh", "-c", script or f"touch {marker}"])
    return (
        "legacy_approaches:\n"
        "  legacy-ok:\n"
        "    approach: command\n"
        f"    command: {{argv: {command}, timeout_s: 30, env_allowlist: [PATH]}}\n"
        f"    sandbox_profile: {sandbox}\n"
    )


@pytest.mark.parametrize(
    ("ref", "grant", "reason"),
    [
        ("harness.unknown@1.0.0", GRANT, "is not in the profile catalogue"),
        ("harness.brief", GRANT, "must be <id>@<version>"),
        ("harness.brief@1", GRANT, "must be pinned"),
        ("harness.brief@latest", GRANT, "must be pinned"),
        ("harness.brief@^1.0.0", GRANT, "must be pinned"),
        ("Harness Brief@@", GRANT, "must not contain whitespace"),
        ("", None, "must not be empty"),
        (None, GRANT, "carries a repository grant but no harness_profile_ref"),
        ("harness.brief@1.0.0", None, "carries no repository grant"),
        ("harness.outside@1.0.0", GRANT, "is outside the grant's allowed_paths"),
    ],
    ids=[
        "unknown",
        "unversioned",
        "partial-version",
        "tag",
        "range",
        "malformed",
        "empty",
        "grant-without-ref",
        "brief-without-grant",
        "brief-path-outside-grant",
    ],
)
async def test_a_refused_profile_fails_the_run_without_executing_anything(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    ref: str | None,
    grant: dict[str, Any] | None,
    reason: str,
) -> None:
    repo = repos.make()
    refs_before = Repos.refs(repo)
    marker = tmp_path / "legacy-ran"
    # unconfined, so that the marker would show the legacy approach running
    settings = worker_settings(
        tmp_path,
        repos,
        write_catalogue(
            tmp_path / "profiles.yaml", legacy=_legacy_table(marker, sandbox=UNCONFINED)
        ),
        rein_aharness_allow_unsandboxed=True,
    )
    # the hint names a runnable legacy approach: it must never stand in for the ref
    run_id = await activity_core.seeded.run(
        harness_profile_ref=ref, repository_grant=grant, approach_hint="legacy-ok"
    )
    transport = RecordingTransport(activity_core.transport())

    runtime = await run_worker_once(settings, transport)

    [report] = runtime.worker.reports
    assert report.close is not None and report.close.path == "outbox"
    row = await activity_core.row(run_id)
    assert row["state"] == "failed"
    assert reason in row["last_error"]
    assert transport.paths("/heartbeat") == []
    assert not marker.exists()
    assert Repos.refs(repo) == refs_before
    assert not (tmp_path / "state" / "worktrees").exists()
    snapshot = outbox(settings).snapshot()
    assert snapshot.pending == () and snapshot.delivered_count == 1


# -- grant violations ------------------------------------------------------------------------

_COMMIT = "git add -A && git commit -qm work"
_DOT_GIT_COMMIT = (
    "b=$(echo evil | git hash-object -w --stdin) && "
    "t1=$(printf '100644 blob %s\\tconfig\\n' $b | git mktree) && "
    "t2=$(printf '040000 tree %s\\t.git\\n' $t1 | git mktree) && "
    "t3=$(printf '040000 tree %s\\tbriefs\\n' $t2 | git mktree) && "
    "c=$(git commit-tree $t3 -p HEAD -m evil) && git update-ref --no-deref HEAD $c"
)
_ORPHAN = (
    "echo x > briefs/new.md && git add -A && "
    "c=$(git commit-tree $(git write-tree) -m orphan) && git reset -q --hard $c"
)


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        (
            f"echo a > briefs/a.md && {_COMMIT} && echo b > briefs/b.md && {_COMMIT}",
            "2 commits is outside the grant's commit_count 1..1",
        ),
        (f"echo x > README.md && {_COMMIT}", "outside the grant's allowed_paths: 'README.md'"),
        (
            f"mkdir -p briefs/sub && git mv README.md briefs/sub/README.md && {_COMMIT}",
            "outside the grant's allowed_paths: 'README.md'",
        ),
        (_DOT_GIT_COMMIT, "must not contain a .git segment): 'briefs/.git/config'"),
        (_ORPHAN, "does not descend from the baseline"),
        (
            # unconfined (a sandbox shows refs read-only): the judge is what catches it
            f"echo x > briefs/x.md && {_COMMIT} && git branch evil && git tag v-evil",
            "changed refs of the target repository",
        ),
        ("true", "0 commits is outside the grant's commit_count 1..1"),
    ],
    ids=[
        "too-many-commits",
        "path-outside-grant",
        "rename-out-of-grant",
        "dot-git-path",
        "not-a-descendant",
        "branch-and-tag",
        "no-commit",
    ],
)
async def test_work_outside_the_grant_is_rejected_and_discarded(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, script: str, reason: str
) -> None:
    repo = repos.make()
    refs_before = Repos.refs(repo)
    commits_before = Repos.commit_count(repo)
    sandbox = UNCONFINED if "git branch" in script else "profile.bwrap-local"
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml", command_profile("work", script, sandbox=sandbox)
    )
    settings = worker_settings(tmp_path, repos, catalogue, rein_aharness_allow_unsandboxed=True)
    run_id = await activity_core.granted_run("work")

    await run_worker_once(settings, RecordingTransport(activity_core.transport()))

    row = await activity_core.row(run_id)
    assert row["state"] == "failed"
    assert reason in row["last_error"], row["last_error"]
    transaction = row["result"]["repository_transaction"]
    assert transaction["acceptance"] == "rejected"
    assert transaction["accepted_commits"] == [] and transaction["accepted_paths"] == []
    assert row["result"]["ok"] is False
    # the target repository is exactly as before: no landing, no branch, no tag
    assert Repos.refs(repo) == refs_before
    assert Repos.commit_count(repo) == commits_before
    assert Repos.status(repo) == ""
    _no_worktrees_left(tmp_path, repo)


async def test_nothing_can_be_pushed_even_to_a_local_remote(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    remote_refs = Repos.refs(remote)
    pushed = tmp_path / "push-status"
    script = (
        f"echo x > briefs/x.md && {_COMMIT} && "
        f"(git push -q origin HEAD:refs/heads/published; echo $? > {pushed}) 2>/dev/null"
    )
    # unconfined, so the remote is reachable and git's own refusal is what is tested
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml", command_profile("push", script, sandbox=UNCONFINED)
    )
    settings = worker_settings(tmp_path, repos, catalogue, rein_aharness_allow_unsandboxed=True)
    run_id = await activity_core.granted_run("push")

    await run_worker_once(settings, RecordingTransport(activity_core.transport()))

    assert pushed.read_text().strip() != "0"  # git refused the transport
    assert Repos.refs(remote) == remote_refs
    assert (await activity_core.row(run_id))["state"] == "succeeded"


# -- the legacy approach table -------------------------------------------------------------


async def test_a_legacy_row_runs_its_table_approach_and_closes_directly(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    # in its sandbox: it sees the worktree at /workspace (and exits 1 if not)
    settings = worker_settings(
        tmp_path,
        repos,
        write_catalogue(
            tmp_path / "profiles.yaml",
            legacy=_legacy_table(tmp_path / "m", 'test "$PWD" = /workspace -a -f README.md'),
        ),
    )
    run_id = await activity_core.seeded.run(harness_profile_ref=None, approach_hint="legacy-ok")
    transport = RecordingTransport(activity_core.transport())

    runtime = await run_worker_once(settings, transport)

    [report] = runtime.worker.reports
    assert report.selection == "legacy"
    assert report.close is not None
    assert (report.close.path, report.close.state) == ("direct", "delivered")
    row = await activity_core.row(run_id)
    assert row["state"] == "succeeded"
    assert row["result"] == {
        "ok": True,
        "target_repo": "research/briefs",
        "head_after": git(repo, "rev-parse", "HEAD"),
        "committed": False,
    }
    # not outboxed: the outbox never saw it
    snapshot = outbox(settings).snapshot()
    assert snapshot.pending == () and snapshot.delivered_count == 0
    _no_worktrees_left(tmp_path, repo)


async def test_a_legacy_row_may_not_commit(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    refs_before = Repos.refs(repo)
    settings = worker_settings(
        tmp_path,
        repos,
        write_catalogue(
            tmp_path / "profiles.yaml",
            legacy=_legacy_table(tmp_path / "m", f"echo x > briefs/x.md && {_COMMIT}"),
        ),
    )
    run_id = await activity_core.seeded.run(harness_profile_ref=None, approach_hint="legacy-ok")

    await run_worker_once(settings, RecordingTransport(activity_core.transport()))

    row = await activity_core.row(run_id)
    assert row["state"] == "failed"
    assert "no repository grant and may not commit" in row["last_error"]
    assert Repos.refs(repo) == refs_before
    assert outbox(settings).snapshot().delivered_count == 0


async def test_a_profile_absent_row_without_a_table_entry_is_failed_directly(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repos.make()
    settings = worker_settings(tmp_path, repos)
    run_id = await activity_core.seeded.run(harness_profile_ref=None, approach_hint="unknown")

    runtime = await run_worker_once(settings, RecordingTransport(activity_core.transport()))

    [report] = runtime.worker.reports
    assert report.close is not None and report.close.path == "direct"
    row = await activity_core.row(run_id)
    assert row["state"] == "failed"
    assert "is not in the legacy approach table" in row["last_error"]
    assert outbox(settings).snapshot().delivered_count == 0


# -- a lost complete response --------------------------------------------------------------


async def test_a_lost_complete_response_is_replayed_to_reconciled(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    settings = worker_settings(tmp_path, repos)
    run_id = await activity_core.granted_run("brief")
    transport = RecordingTransport(activity_core.transport())
    applied: list[str] = []

    async def drop_the_answer(request: httpx.Request, response: httpx.Response) -> httpx.Response:
        if request.url.path.endswith("/complete") and not applied:
            applied.append(response.json()["close_disposition"])
            raise httpx.ReadTimeout("the answer never arrived", request=request)
        return response

    transport.after = drop_the_answer
    # no in-client retry: the first pass leaves the close pending
    first = await run_worker_once(settings, transport, retry=FAST_ONCE)

    assert applied == ["applied"]
    [report] = first.worker.reports
    assert report.close is not None and report.close.state == "pending"
    closed = await activity_core.row(run_id)
    assert closed["state"] == "succeeded"
    commits = Repos.commit_count(repo)

    second = RecordingTransport(activity_core.transport())
    again = await run_worker_once(settings, second)

    assert second.calls == [
        f"PUT /ops-runs/{run_id}/changes",  # the replay uploads first; the same digest: 200
        f"POST /ops-runs/{run_id}/complete",
        "POST /ops-runs/claim",
    ]
    assert again.worker.reports == []
    row = await activity_core.row(run_id)
    assert (row["state"], row["updated_at"], row["result"]) == (
        "succeeded",
        closed["updated_at"],
        closed["result"],
    )
    [delivered] = (tmp_path / "state" / "close-outbox" / "delivered").iterdir()
    record = json.loads(delivered.read_bytes())
    assert (record["disposition"], record["attempts"]) == ("reconciled", 2)
    assert Repos.commit_count(repo) == commits
    assert len(Repos.landings(repo)) == 1


# -- shutdown and events ---------------------------------------------------------------------


async def test_a_stop_request_abandons_a_run_that_outlasts_the_grace_period(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    refs_before = Repos.refs(repo)
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml", command_profile("slow", "touch started; sleep 20")
    )
    settings = worker_settings(tmp_path, repos, catalogue, rein_aharness_shutdown_grace_seconds=0.2)
    run_id = await activity_core.granted_run("slow")
    transport = RecordingTransport(activity_core.transport())
    stop = anyio.Event()

    async with (
        open_worker(
            settings,
            load_catalogue(catalogue),
            transports=Transports(queue=transport),
            retry=FAST,
        ) as runtime,
        anyio.create_task_group() as tasks,
    ):

        async def stop_once_started() -> None:
            while not started_in_a_worktree(tmp_path / "state"):
                await anyio.sleep(0.05)
            stop.set()

        tasks.start_soon(stop_once_started)
        with anyio.fail_after(15):
            await runtime.worker.run(stop=stop)

    [report] = runtime.worker.reports
    assert (report.selection, report.close) == ("abandoned", None)
    assert transport.paths("/complete") == [] and transport.paths("/fail") == []
    assert len(transport.paths("/claim")) == 1  # stopped: no second claim
    assert (await activity_core.row(run_id))["state"] == "claimed"  # its lease will expire
    assert Repos.refs(repo) == refs_before
    _no_worktrees_left(tmp_path, repo)


async def test_completion_events_are_posted_to_the_configured_sink(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repos.make()
    settings = worker_settings(
        tmp_path,
        repos,
        rein_aharness_event_sink_url="http://events.test/hooks/ops",
    )
    run_id = await activity_core.seeded.run(
        harness_profile_ref="harness.brief@1.0.0",
        repository_grant=GRANT,
        idempotency_key="fi-daily-brief:daily-brief:scheduled:2026-01-05T06:00:00+01:00",
    )
    posted: list[httpx.Request] = []

    def sink(request: httpx.Request) -> httpx.Response:
        posted.append(request)
        return httpx.Response(202)

    await run_worker_once(
        settings,
        RecordingTransport(activity_core.transport()),
        events=httpx.MockTransport(sink),
    )

    [request] = posted
    assert str(request.url) == "http://events.test/hooks/ops"
    assert request.headers["Idempotency-Key"] == str(run_id)
    event = json.loads(request.content)
    assert (event["event"], event["activity_id"], event["run_id"]) == (
        "fi_daily_brief",
        "fi-daily-brief",
        str(run_id),
    )
    assert event["result"]["committed"] is True


# -- approach failures, output, remote Glas --------------------------------------------------


async def test_a_timed_out_command_fails_the_run_with_reopen(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, run_command: RunCommand
) -> None:
    repo = repos.make()
    refs_before = Repos.refs(repo)
    run_id, runtime = await run_command(
        "hang", f"echo x > briefs/x.md && {_COMMIT} && sleep 10", timeout_s=0.5
    )

    [report] = runtime.worker.reports
    assert report.close is not None and report.close.disposition == "reopened"
    row = await activity_core.row(run_id)
    assert (row["state"], row["last_error"]) == ("open", "the command timed out after 0.5 s")
    assert Repos.refs(repo) == refs_before
    _no_worktrees_left(tmp_path, repo)


async def test_command_output_never_reaches_the_result_or_the_outbox(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, run_command: RunCommand
) -> None:
    repos.make()
    run_id, _ = await run_command(
        "chatty", f"echo SECRET-OUTPUT; echo SECRET-ERROR >&2; echo x > briefs/x.md && {_COMMIT}"
    )

    row = await activity_core.row(run_id)
    assert row["state"] == "succeeded"
    stored = json.dumps(row["result"])
    assert "SECRET" not in stored
    for path in (tmp_path / "state").rglob("*.json"):
        assert b"SECRET" not in path.read_bytes()


async def test_a_remote_glas_gateway_executes_the_profiled_request(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    catalogue = write_catalogue(tmp_path / "profiles.yaml", command_profile("remote", "false"))
    settings = worker_settings(
        tmp_path,
        repos,
        catalogue,
        rein_aharness_glas_url="http://glas.test",
        rein_aharness_repositories_root=None,
    )
    run_id = await activity_core.seeded.run(harness_profile_ref="harness.remote@1.0.0")
    asked: list[dict[str, Any]] = []

    def glas(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append(body)
        return httpx.Response(
            200,
            json={
                "ok": True,
                "evidence": glas_evidence(
                    body, resolved_model="claude-sonnet-4-6", tokens_spent=321
                ),
                "target_repo": "research/briefs",
                "tool_output": "dropped",
            },
        )

    queue = RecordingTransport(activity_core.transport())
    await run_worker_once(settings, queue, glas=httpx.MockTransport(glas))

    assert [body["request_id"] for body in asked] == [f"{run_id}.1"]
    row = await activity_core.row(run_id)
    assert row["state"] == "succeeded"
    assert row["result"]["execution_evidence"]["tokens_spent"] == 321
    assert row["result"]["execution_evidence"]["resolved_model"] == "claude-sonnet-4-6"
    assert "tool_output" not in json.dumps(row["result"])
