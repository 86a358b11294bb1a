"""The worker hands its accepted work over as a changes bundle (docs/changes.md): real git,
activity-core in-process on real PostgreSQL."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from rein_aharness.outbox import EntryUndeliverable, OutboxStore
from rein_aharness.repository import land
from rein_aharness.repository.changes_bundle import write_changes_bundle
from rein_aharness.repository.changes_store import ChangesStore
from rein_aharness.repository.locate import resolve_repository
from rein_worker_kit import (
    WORKER_ID,
    ActivityCore,
    RecordingTransport,
    Repos,
    git,
    run_worker_once,
    worker_settings,
)


def _bundles(tmp_path: Path) -> list[Path]:
    changes = tmp_path / "state" / "changes"
    return sorted(changes.iterdir()) if changes.exists() else []


async def test_a_bundle_over_the_bound_is_rejected_work_and_nothing_lands(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    refs_before = Repos.refs(repo)
    run_id = await activity_core.granted_run("brief")
    settings = worker_settings(
        tmp_path,
        repos,
        rein_aharness_changes_max_bytes=64,
    )

    await run_worker_once(settings, RecordingTransport(activity_core.transport()))

    row = await activity_core.row(run_id)
    assert row["state"] == "failed"
    assert "changes_too_large" in row["last_error"], row["last_error"]
    transaction = row["result"]["repository_transaction"]
    assert transaction["acceptance"] == "rejected"
    assert transaction.get("changes_digest") is None
    assert Repos.landings(repo) == {}
    assert Repos.refs(repo) == refs_before
    assert _bundles(tmp_path) == []


async def test_a_granted_run_hands_its_changes_over_before_its_close(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, db: asyncpg.Connection
) -> None:
    repo = repos.make()
    run_id = await activity_core.granted_run("brief")
    settings = worker_settings(tmp_path, repos)
    transport = RecordingTransport(activity_core.transport())

    runtime = await run_worker_once(settings, transport)

    [report] = runtime.worker.reports
    assert report.close is not None and report.close.state == "delivered"
    row = await activity_core.row(run_id)
    assert row["state"] == "succeeded"
    transaction = row["result"]["repository_transaction"]
    [stored] = await db.fetch(
        "SELECT attempt, digest, head_after, commits, bundle FROM ops_run_changes"
        " WHERE run_id = $1",
        run_id,
    )
    assert stored["attempt"] == 1
    assert stored["digest"] == transaction["changes_digest"]
    assert "sha256:" + hashlib.sha256(bytes(stored["bundle"])).hexdigest() == stored["digest"]
    assert stored["head_after"] == row["result"]["head_after"]
    assert list(stored["commits"]) == transaction["accepted_commits"]
    # the upload came first, from the very file, which is gone once the close is delivered
    assert transport.paths("/changes") == [f"PUT /ops-runs/{run_id}/changes"]
    assert transport.calls.index(f"PUT /ops-runs/{run_id}/changes") < transport.calls.index(
        f"POST /ops-runs/{run_id}/complete"
    )
    [sent] = transport.sent("/changes")
    assert sent == bytes(stored["bundle"])
    assert _bundles(tmp_path) == []
    # and it is a bundle any clone with the baseline can fetch
    bundle = tmp_path / "got.bundle"
    bundle.write_bytes(sent)
    git(repo, "bundle", "verify", "-q", str(bundle))
    assert Repos.landings(repo) == {f"refs/heads/rein/{run_id}/1": stored["head_after"]}


# -- ChangesStore: the bundle as delivery needs it -------------------------------------------


def _landed_history(repos: Repos) -> tuple[Path, str, str]:
    repo = repos.make()
    baseline = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "work")
    (repo / "briefs" / "a.md").write_text("one\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "work")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "work")
    return repo, baseline, head


def _record(store: OutboxStore, run_id: str, baseline: str, head: str, digest: str) -> Any:
    result = {
        "ok": True,
        "target_repo": "research/briefs",
        "head_after": head,
        "committed": True,
        "repository_transaction": {
            "transaction_id": f"rtx-{run_id}.1",
            "baseline_digest": baseline,
            "changes_digest": digest,
            "acceptance": "accepted",
            "accepted_commits": [head],
            "accepted_paths": ["briefs/a.md"],
        },
    }
    enqueued = store.enqueue_close(
        run_id=run_id,
        transaction_id=f"rtx-{run_id}.1",
        worker_id=WORKER_ID,
        action="complete",
        result=result,
        attempt=1,
    )
    return enqueued.record


RUN = "9a1f6c2e-1111-4d2b-8c3e-5f6a7b8c9d0e"


async def test_a_lost_bundle_is_written_again_from_the_landed_branch(
    repos: Repos, tmp_path: Path, store: OutboxStore
) -> None:
    repo, baseline, head = _landed_history(repos)
    changes = ChangesStore(tmp_path / "changes", repositories_root=repos.root)
    bundle = await write_changes_bundle(
        repo, changes.directory, baseline=baseline, head=head, run_id=RUN, attempt=1
    )
    await land(await resolve_repository(repos.root, "research/briefs"), head, RUN, 1)
    original = bundle.path.read_bytes()
    record = _record(store, RUN, baseline, head, bundle.digest)

    assert await changes.bundle_for(record, bundle.digest) == original
    bundle.path.unlink()
    git(repo, "repack", "-a", "-d", "-q")
    again = await changes.bundle_for(record, bundle.digest)
    assert again == original
    assert "sha256:" + hashlib.sha256(again).hexdigest() == bundle.digest
    assert bundle.path.read_bytes() == original  # the file is back

    # a corrupted file is not handed over: it is written again too
    bundle.path.write_bytes(b"not a bundle")
    assert await changes.bundle_for(record, bundle.digest) == original

    changes.discard(bundle.digest)
    assert not bundle.path.exists()


async def test_a_bundle_that_cannot_be_written_again_is_undeliverable(
    repos: Repos, tmp_path: Path, store: OutboxStore
) -> None:
    repo, baseline, head = _landed_history(repos)
    changes = ChangesStore(tmp_path / "changes", repositories_root=repos.root)
    await land(await resolve_repository(repos.root, "research/briefs"), head, RUN, 1)
    wrong = "sha256:" + "0" * 64
    record = _record(store, RUN, baseline, head, wrong)
    with pytest.raises(EntryUndeliverable) as raised:
        await changes.bundle_for(record, wrong)
    assert raised.value.reason == "changes_digest_mismatch"
    assert list(changes.directory.iterdir()) == []  # the other bundle is not kept

    git(repo, "update-ref", "-d", f"refs/heads/rein/{RUN}/1")
    with pytest.raises(EntryUndeliverable) as raised:
        await changes.bundle_for(record, wrong)
    assert raised.value.reason == "changes_unavailable"


async def test_prune_keeps_only_the_bundles_pending_closes_refer_to(
    repos: Repos, tmp_path: Path, store: OutboxStore
) -> None:
    repo, baseline, head = _landed_history(repos)
    changes = ChangesStore(tmp_path / "changes", repositories_root=repos.root)
    kept = await write_changes_bundle(
        repo, changes.directory, baseline=baseline, head=head, run_id=RUN, attempt=1
    )
    orphan = await write_changes_bundle(
        repo, changes.directory, baseline=baseline, head=head, run_id=RUN, attempt=2
    )
    (changes.directory / ".tmp-leftover").write_bytes(b"x")
    _record(store, RUN, baseline, head, kept.digest)
    assert changes.prune(store.pending_records()) == 2
    assert sorted(p.name for p in changes.directory.iterdir()) == [kept.path.name]
    assert not orphan.path.exists()
