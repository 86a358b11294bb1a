"""A remote Glas's granted completion hands its changes over (gateway/remote_changes.py):
real git bundles, the worker against activity-core in-process on real PostgreSQL, Glas a
stand-in HTTP peer (httpx.MockTransport) serving the POST and the bundle GET."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ops_contracts import acceptance_policy_id, grant_id, parse_repository_grant
from ops_testsupport.changes_bundles import (
    build_changes_bundle,
    bundle_of_another_attempt,
    bundle_with_ref_tip,
    commit_files,
    garbage_bundle,
    make_repository,
)
from rein_aharness.worker import WorkerRuntime
from rein_worker_kit import (
    FAST,
    GRANT,
    ActivityCore,
    RecordingTransport,
    Repos,
    command_profile,
    glas_evidence,
    outbox,
    run_worker_once,
    worker_settings,
    write_catalogue,
)

BUNDLE_PATH = "/changes.bundle"


class StandInGlas:
    """Answers the POST with a granted completion of `head` on `baseline`, and the GET
    with `bundle` (or whatever `on_get` answers); records every request."""

    def __init__(self, repo: Path, baseline: str, head: str) -> None:
        self.repo, self.baseline, self.head = repo, baseline, head
        self.calls: list[str] = []
        self.bundle: bytes = b""
        self.on_get: Callable[[httpx.Request], httpx.Response] | None = None
        self.result_baseline: str | None = baseline

    def changes(self, run_id: object) -> bytes:
        """The genuine changes bundle of `run_id`'s attempt 1 over this history."""
        return build_changes_bundle(self.repo, self.baseline, self.head, str(run_id), 1)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(f"{request.method} {request.url.path}")
        if request.method == "GET" and request.url.path.endswith(BUNDLE_PATH):
            assert request.headers["authorization"] == "Bearer glas-token"
            if self.on_get is not None:
                return self.on_get(request)
            return httpx.Response(
                200, content=self.bundle, headers={"content-type": "application/x-git-bundle"}
            )
        body = json.loads(request.content)
        run_id = body["run"]["id"]
        grant = parse_repository_grant(GRANT)
        return httpx.Response(
            200,
            json={
                "ok": True,
                "evidence": glas_evidence(body, head_after=self.head),
                "repository_transaction": {
                    "transaction_id": f"rtx-{run_id}.{body['run']['attempt']}",
                    "baseline_digest": self.result_baseline,
                    "grant_id": grant_id(grant),
                    "acceptance_policy_id": acceptance_policy_id(grant),
                    "acceptance": "accepted",
                    "accepted_commits": [self.head],
                    "accepted_paths": ["briefs/x.md"],
                },
                "path": "briefs/x.md",
                "head_after": self.head,
                "target_repo": "research/briefs",
                "committed": True,
            },
        )

    def gets(self) -> int:
        return sum(1 for call in self.calls if call.startswith("GET "))


async def _seeded(activity_core: ActivityCore, tmp_path: Path) -> tuple[uuid.UUID, StandInGlas]:
    """A remote run seeded, and a stand-in Glas over a new history (tmp_path/glas-repo)."""
    repo = tmp_path / "glas-repo"
    baseline = make_repository(repo)
    head = commit_files(repo, {"briefs/x.md": "the brief\n"}, "brief")
    return await activity_core.granted_run("remote"), StandInGlas(repo, baseline, head)


async def _run(settings: Any, glas: StandInGlas, queue: httpx.AsyncBaseTransport) -> WorkerRuntime:
    return await run_worker_once(settings, queue, glas=httpx.MockTransport(glas.handler))


def _settings(tmp_path: Path, repos: Repos, **overrides: Any) -> Any:
    catalogue = write_catalogue(tmp_path / "profiles.yaml", command_profile("remote", "false"))
    return worker_settings(
        tmp_path,
        repos,
        catalogue,
        rein_aharness_glas_url="http://glas.test",
        rein_aharness_glas_token="glas-token",
        rein_aharness_repositories_root=None,
        **overrides,
    )


def _bundles(tmp_path: Path) -> list[Path]:
    changes = tmp_path / "state" / "changes"
    return sorted(changes.iterdir()) if changes.exists() else []


async def _changes_rows(db: asyncpg.Connection, run_id: uuid.UUID) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await db.fetch(
        "SELECT attempt, digest, head_after, bundle FROM ops_run_changes WHERE run_id = $1",
        run_id,
    )
    return rows


async def test_a_remote_granted_run_fetches_uploads_and_succeeds(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, db: asyncpg.Connection
) -> None:
    run_id, glas = await _seeded(activity_core, tmp_path)
    glas.bundle = glas.changes(run_id)
    queue = RecordingTransport(activity_core.transport())

    await _run(_settings(tmp_path, repos), glas, queue)

    assert glas.calls == [
        "POST /v1/requests",
        f"GET /v1/requests/{run_id}.1/changes.bundle",
    ]
    row = await activity_core.row(run_id)
    assert row["state"] == "succeeded", row["last_error"]
    transaction = row["result"]["repository_transaction"]
    digest = "sha256:" + hashlib.sha256(glas.bundle).hexdigest()
    assert transaction["changes_digest"] == digest
    [stored] = await _changes_rows(db, run_id)
    assert stored["attempt"] == 1
    assert stored["digest"] == digest
    assert stored["head_after"] == glas.head
    assert bytes(stored["bundle"]) == glas.bundle
    assert queue.calls.index(f"PUT /ops-runs/{run_id}/changes") < queue.calls.index(
        f"POST /ops-runs/{run_id}/complete"
    )
    assert _bundles(tmp_path) == []  # removed once the close was delivered
    assert outbox(_settings(tmp_path, repos)).pending_records() == []


def _not_found(request: httpx.Request) -> httpx.Response:
    return httpx.Response(404, json={"code": "not_found", "detail": "no such bundle"})


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("not_found", "changes_unavailable"),
        ("another_attempt", "changes_invalid"),
        ("wrong_tip", "changes_invalid"),
        ("over_the_bound", "changes_too_large"),
        ("garbage", "changes_invalid"),
        ("bad_pack", "changes_invalid"),
        ("result_without_baseline", "changes_invalid"),
    ],
)
async def test_a_bundle_glas_cannot_give_fails_the_run_with_the_reason(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    db: asyncpg.Connection,
    case: str,
    reason: str,
) -> None:
    run_id, glas = await _seeded(activity_core, tmp_path)
    real = glas.changes(run_id)
    overrides: dict[str, Any] = {}
    if case == "not_found":
        glas.on_get = _not_found
    elif case == "another_attempt":
        glas.bundle = bundle_of_another_attempt(glas.repo, glas.baseline, glas.head, str(run_id), 1)
    elif case == "wrong_tip":
        glas.bundle = bundle_with_ref_tip(
            glas.repo, glas.baseline, glas.head, str(run_id), 1, glas.baseline
        )
    elif case == "over_the_bound":
        glas.bundle = real
        overrides["rein_aharness_changes_max_bytes"] = len(real) - 1
    elif case == "garbage":
        glas.bundle = garbage_bundle("binary")
    elif case == "result_without_baseline":
        glas.bundle = real
        glas.result_baseline = None
    else:
        header = real[: real.index(b"\n\nPACK") + 2]
        glas.bundle = header + b"PACK\x00\x00\x00\x02\x00\x00\x00\x01garbage"

    await _run(
        _settings(tmp_path, repos, **overrides), glas, RecordingTransport(activity_core.transport())
    )

    row = await activity_core.row(run_id)
    assert row["state"] == "failed"
    assert row["last_error"].startswith(reason), row["last_error"]
    if case == "result_without_baseline":
        assert glas.gets() == 0  # nothing to check a bundle against: not even asked
    transaction = row["result"]["repository_transaction"]
    assert transaction["acceptance"] == "rejected"
    assert transaction.get("changes_digest") is None
    assert row["result"].get("head_after") is None
    assert await _changes_rows(db, run_id) == []
    assert _bundles(tmp_path) == []
    store = outbox(_settings(tmp_path, repos))
    assert store.pending_records() == []
    assert store.snapshot().quarantined == ()


async def test_glas_unavailable_on_the_get_reopens_the_run(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, db: asyncpg.Connection
) -> None:
    run_id, glas = await _seeded(activity_core, tmp_path)
    answers: list[Any] = [httpx.Response(503), httpx.ConnectError("dropped")]

    def flaky(request: httpx.Request) -> httpx.Response:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, httpx.Response)
        return answer

    glas.on_get = flaky

    await _run(_settings(tmp_path, repos), glas, RecordingTransport(activity_core.transport()))

    assert glas.gets() == FAST.attempts  # retried, then given up
    row = await activity_core.row(run_id)
    assert row["state"] == "open"  # reopened, not failed
    assert await _changes_rows(db, run_id) == []
    assert _bundles(tmp_path) == []
    assert outbox(_settings(tmp_path, repos)).pending_records() == []


@pytest.mark.parametrize("same_bytes", [True, False])
async def test_a_lost_bundle_is_fetched_again_on_replay(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    db: asyncpg.Connection,
    same_bytes: bool,
) -> None:
    """The upload meets an outage, so the close stays pending; the bundle file is lost;
    the next pass fetches it again from Glas and sends it only if its digest is the
    intent's (else the entry is quarantined, nothing uploaded)."""
    run_id, glas = await _seeded(activity_core, tmp_path)
    glas.bundle = glas.changes(run_id)
    digest = "sha256:" + hashlib.sha256(glas.bundle).hexdigest()
    queue = RecordingTransport(activity_core.transport())

    async def outage(request: httpx.Request) -> httpx.Response | None:
        if request.method == "PUT":
            raise httpx.ConnectError("activity-core away")
        return None

    queue.before = outage
    settings = _settings(tmp_path, repos)
    await _run(settings, glas, queue)
    [pending] = outbox(settings).pending_records()
    assert pending.attempt == 1
    [kept] = _bundles(tmp_path)
    assert kept.name == digest.removeprefix("sha256:") + ".bundle"
    kept.unlink()
    if not same_bytes:
        glas.bundle = glas.changes(run_id) + b"\n"

    queue.before = None
    puts_before = len(queue.paths("/changes"))
    await _run(settings, glas, queue)

    assert glas.gets() == 2
    row = await activity_core.row(run_id)
    store = outbox(settings)
    if same_bytes:
        assert row["state"] == "succeeded", row["last_error"]
        [stored] = await _changes_rows(db, run_id)
        assert (
            stored["digest"] == digest == row["result"]["repository_transaction"]["changes_digest"]
        )
        assert store.pending_records() == []
        assert _bundles(tmp_path) == []
    else:
        assert row["state"] == "claimed"  # nothing was closed: its lease will lapse
        assert await _changes_rows(db, run_id) == []
        [quarantined] = store.snapshot().quarantined
        assert quarantined.reason == "changes_digest_mismatch"
        assert len(queue.paths("/changes")) == puts_before  # nothing else was sent
