"""PUT /ops-runs/{run_id}/changes (docs/changes.md): a granted run's attempt hands over its
changes bundle; fenced like a complete, checked with real git against the grant, stored
once per attempt; and the close of a granted run needs it.

Every refusal here leaves ops_run_changes without a row for the run, and no body, however
hostile, is answered 500.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ac_changes import Changes, completion, make_changes
from ac_testkit import WORKER_ID, AppClient, SeededQueue
from ops_testsupport.changes_bundles import (
    build_changes_bundle,
    bundle_from_other_history,
    bundle_of_another_attempt,
    bundle_with_merges,
    bundle_with_ref_tip,
    commit_files,
    garbage_bundle,
    git,
)

GRANT = {
    "version": "1",
    "allowed_paths": ["briefs/", "README.md"],
    "commit_count": {"min": 1, "max": 2},
    "publish": False,
}
OTHER_WORKER = "rein-aharness@other"


async def put_bundle(
    api: AppClient,
    run_id: uuid.UUID,
    content: bytes,
    credential: dict[str, str],
    params: dict[str, Any] | None = None,
) -> httpx.Response:
    """PUT a bundle to /ops-runs/{run_id}/changes with only `credential` beside its content
    type: no digest, unlike `AppClient.upload_changes`."""
    return await api.http.put(
        f"/ops-runs/{run_id}/changes",
        params=params if params is not None else {"worker_id": WORKER_ID, "attempt": 1},
        content=content,
        headers={**credential, "Content-Type": "application/x-git-bundle"},
    )


async def granted_claim(api: AppClient, seeded: SeededQueue) -> uuid.UUID:
    run_id = await seeded.run(repository_grant=GRANT)
    [run] = (await api.claim()).json()["runs"]
    assert run["id"] == str(run_id)
    return run_id


async def stored_rows(db: asyncpg.Connection, run_id: uuid.UUID) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT * FROM ops_run_changes WHERE run_id = $1 ORDER BY attempt", run_id
    )


def assert_refused(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code, response.text


# -- the happy path -------------------------------------------------------------------------


async def test_an_upload_is_stored_once_and_repeats_are_idempotent(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    run_id = await granted_claim(api, seeded)
    changes = make_changes(
        tmp_path,
        run_id,
        commits=[{"briefs/a.md": "one\n"}, {"briefs/a.md": "two\n", "README.md": None}],
    )
    response = await api.upload_changes(run_id, changes.bundle)
    assert response.status_code == 201, response.text
    expected = {
        "run_id": str(run_id),
        "attempt": 1,
        "digest": changes.digest,
        "size": len(changes.bundle),
        "baseline": changes.baseline,
        "head_after": changes.head_after,
        "commits": list(changes.commits),
        "paths": ["README.md", "briefs/a.md"],
    }
    assert response.json() == expected
    [row] = await stored_rows(db, run_id)
    assert bytes(row["bundle"]) == changes.bundle
    assert row["digest"] == changes.digest
    assert list(row["commits"]) == list(changes.commits)

    again = await api.upload_changes(run_id, changes.bundle)
    assert again.status_code == 200, again.text
    assert again.json() == expected

    other = make_changes(tmp_path / "other", run_id, commits=[{"briefs/b.md": "b\n"}])
    assert_refused(await api.upload_changes(run_id, other.bundle), 409, "changes_conflict")
    [row] = await stored_rows(db, run_id)
    assert row["digest"] == changes.digest


async def test_a_sha256_repository_bundle_is_taken(
    api: AppClient, seeded: SeededQueue, tmp_path: Path
) -> None:
    from ops_testsupport.changes_bundles import make_repository

    run_id = await granted_claim(api, seeded)
    repo = tmp_path / "sha256"
    baseline = make_repository(repo, object_format="sha256")
    tip = commit_files(repo, {"briefs/x.md": "x\n"}, "x")
    bundle = build_changes_bundle(repo, baseline, tip, str(run_id), 1)
    response = await api.upload_changes(run_id, bundle)
    assert response.status_code == 201, response.text
    assert response.json()["head_after"] == tip
    assert len(tip) == 64


# -- the fence ------------------------------------------------------------------------------


async def test_the_fence_is_a_completes(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    missing = uuid.uuid4()
    changes = make_changes(tmp_path, missing)
    assert_refused(await api.upload_changes(missing, changes.bundle), 404, "not_found")

    ours = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, ours)
    # another attempt than the current one: stale, like a close naming it
    later = make_changes(tmp_path / "later", ours, attempt=2)
    assert_refused(await api.upload_changes(ours, later.bundle, attempt=2), 409, "expired_lease")
    await seeded.expire_lease(ours)
    assert_refused(await api.upload_changes(ours, changes.bundle), 409, "expired_lease")

    open_run = await seeded.run(repository_grant=GRANT)
    changes = make_changes(tmp_path, open_run)
    assert_refused(await api.upload_changes(open_run, changes.bundle), 409, "state_conflict")

    theirs = await seeded.run(
        repository_grant=GRANT,
        state="claimed",
        claim_owner=OTHER_WORKER,
        attempt=1,
        lease_until=datetime.now().astimezone() + timedelta(minutes=5),
    )
    changes = make_changes(tmp_path, theirs)
    assert_refused(await api.upload_changes(theirs, changes.bundle), 409, "wrong_owner")

    for run_id in (open_run, theirs, ours):
        assert await stored_rows(db, run_id) == []


async def test_a_terminal_run_takes_only_its_owners_repeat(
    api: AppClient, seeded: SeededQueue, tmp_path: Path
) -> None:
    failed = await granted_claim(api, seeded)
    assert (await api.fail(failed, error="gave up")).status_code == 200
    changes = make_changes(tmp_path, failed)
    assert_refused(await api.upload_changes(failed, changes.bundle), 409, "terminal_conflict")

    done = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, done)
    assert (await api.upload_changes(done, changes.bundle)).status_code == 201
    assert (await api.complete(done, completion(GRANT, changes))).status_code == 200
    # the worker lost the answer of its close and replays upload-then-close
    assert (await api.upload_changes(done, changes.bundle)).status_code == 200
    reconciled = await api.complete(done, completion(GRANT, changes))
    assert reconciled.json()["close_disposition"] == "reconciled"
    other = make_changes(tmp_path / "other", done, commits=[{"briefs/z.md": "z\n"}])
    assert_refused(await api.upload_changes(done, other.bundle), 409, "terminal_conflict")


async def test_a_run_without_a_grant_has_no_changes_to_hand_over(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    run_id = await seeded.run()
    [run] = (await api.claim()).json()["runs"]
    changes = make_changes(tmp_path, run["id"])
    assert_refused(await api.upload_changes(run_id, changes.bundle), 422, "changes_invalid")
    assert await stored_rows(db, run_id) == []


async def test_credentials_and_identity_come_first(
    api: AppClient, seeded: SeededQueue, tmp_path: Path
) -> None:
    run_id = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, run_id)
    response = await put_bundle(api, run_id, b"x" * (9 << 20), {})
    assert_refused(response, 401, "unauthenticated")
    response = await put_bundle(api, run_id, changes.bundle, api.operator_headers())
    assert_refused(response, 403, "forbidden")
    assert_refused(
        await api.upload_changes(run_id, changes.bundle, worker_id=OTHER_WORKER),
        403,
        "worker_identity_mismatch",
    )


# -- what the bundle must be ----------------------------------------------------------------


def _tampered(kind: str, run_id: uuid.UUID, where: Path) -> bytes:
    rid = str(run_id)
    if kind.startswith("garbage-"):
        return garbage_bundle(kind.removeprefix("garbage-"))
    changes = make_changes(where, run_id, commits=[{"briefs/a.md": "a\n"}, {"briefs/b.md": "b"}])
    repo, baseline, tip = changes.repo, changes.baseline, changes.head_after
    if kind == "another-attempt":
        return bundle_of_another_attempt(repo, baseline, tip, rid, 1)
    if kind == "ref-names-a-commit-not-in-the-pack":
        stray = git(repo, "hash-object", "-w", "--stdin", stdin=b"stray").decode().strip()
        return bundle_with_ref_tip(repo, baseline, tip, rid, 1, stray)
    if kind == "ref-names-a-blob":
        blob = git(repo, "rev-parse", f"{tip}:briefs/a.md").decode().strip()
        return bundle_with_ref_tip(repo, baseline, tip, rid, 1, blob)
    if kind == "history-not-from-the-baseline":
        # the header names a sibling of the history (in the pack), not its start
        git(repo, "checkout", "-q", "-b", "sibling", baseline)
        sibling = commit_files(repo, {"briefs/s.md": "s\n"}, "sibling")
        return build_changes_bundle(
            repo, baseline, tip, rid, 1, prerequisite=sibling, extra_objects=(sibling,)
        )
    if kind == "unrelated-baseline":
        return bundle_from_other_history(repo, baseline, tip, rid, 1, "e" * 40)
    if kind == "path-outside-the-grant":
        outside = commit_files(repo, {"src/evil.py": "x\n"}, "outside")
        return build_changes_bundle(repo, changes.commits[0], outside, rid, 1)
    if kind == "a-git-path":
        sneaky = _commit_with_a_git_directory(repo, tip)
        return build_changes_bundle(repo, changes.commits[0], sneaky, rid, 1)
    if kind == "a-rename-out-of-the-grant":
        git(repo, "mv", "briefs/a.md", "a.md")
        moved = commit_files(repo, {}, "move out")
        return build_changes_bundle(repo, changes.commits[0], moved, rid, 1)
    if kind == "too-many-commits":
        third = commit_files(repo, {"briefs/c.md": "c\n"}, "third")
        return build_changes_bundle(repo, baseline, third, rid, 1)
    if kind == "no-commits":
        return build_changes_bundle(repo, tip, tip, rid, 1)
    if kind == "a-merge":
        git(repo, "checkout", "-q", "-b", "side", changes.commits[0])
        side = commit_files(repo, {"briefs/side.md": "s\n"}, "side")
        merge = commit_files(repo, {}, "merge", parents=(side, tip))
        return bundle_with_merges(repo, changes.commits[0], merge, rid, 1)
    if kind == "a-merge-first-parent-only":
        git(repo, "checkout", "-q", "-b", "side2", changes.commits[0])
        side = commit_files(repo, {"briefs/side.md": "s\n"}, "side")
        merge = commit_files(repo, {}, "merge", parents=(changes.commits[0], side))
        return build_changes_bundle(repo, changes.commits[0], merge, rid, 1)
    if kind == "thin-pack":
        # a pack that leaves out objects the diff needs (the baseline's tree)
        bundle = changes.bundle
        header_end = bundle.index(b"\n\n") + 2
        listed = git(repo, "rev-list", "--objects", "--no-object-names", f"{baseline}..{tip}")
        pack = git(repo, "pack-objects", "--stdout", "-q", stdin=listed)
        return bundle[:header_end] + pack
    if kind == "truncated-pack":
        return changes.bundle[: len(changes.bundle) - 30]
    if kind == "a-comment-on-the-prerequisite":
        return changes.bundle.replace(f"-{baseline}\n".encode(), f"-{baseline} hi\n".encode())
    raise AssertionError(kind)


def _commit_with_a_git_directory(repo: Path, parent: str) -> str:
    """A child of `parent` adding briefs/.git/config, made with plumbing (git add refuses
    such a path; a hostile worker would not use git add)."""

    def mktree(entries: str) -> str:
        return git(repo, "mktree", stdin=entries.encode()).decode().strip()

    blob = git(repo, "hash-object", "-w", "--stdin", stdin=b"[core]\n").decode().strip()
    dot_git = mktree(f"100644 blob {blob}\tconfig\n")
    briefs = git(repo, "ls-tree", f"{parent}:briefs").decode()
    briefs_tree = mktree(briefs + f"040000 tree {dot_git}\t.git\n")
    root_lines = [
        f"040000 tree {briefs_tree}\tbriefs\n" if line.endswith("\tbriefs") else line + "\n"
        for line in git(repo, "ls-tree", parent).decode().splitlines()
    ]
    tree = mktree("".join(root_lines))
    out = git(repo, "commit-tree", tree, "-p", parent, "-m", "sneaky")
    return out.decode().strip()


TAMPERED = [
    "another-attempt",
    "ref-names-a-commit-not-in-the-pack",
    "ref-names-a-blob",
    "history-not-from-the-baseline",
    "unrelated-baseline",
    "path-outside-the-grant",
    "a-git-path",
    "a-rename-out-of-the-grant",
    "too-many-commits",
    "no-commits",
    "a-merge",
    "a-merge-first-parent-only",
    "thin-pack",
    "truncated-pack",
    "a-comment-on-the-prerequisite",
    "garbage-text",
    "garbage-signature_only",
    "garbage-bad_pack",
    "garbage-binary",
]


@pytest.mark.parametrize("kind", TAMPERED)
async def test_a_tampered_bundle_is_refused_and_nothing_is_stored(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path, kind: str
) -> None:
    run_id = await granted_claim(api, seeded)
    bundle = _tampered(kind, run_id, tmp_path)
    response = await api.upload_changes(run_id, bundle)
    assert_refused(response, 422, "changes_invalid")
    assert response.json()["detail"]
    assert await stored_rows(db, run_id) == []
    # the attempt can still hand over its real changes
    good = make_changes(tmp_path / "good", run_id)
    assert (await api.upload_changes(run_id, good.bundle)).status_code == 201


async def test_the_digest_header_must_be_the_bodys(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    run_id = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, run_id)
    wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    for digest in (wrong, "sha256:ABC", "md5:0", changes.digest.upper()):
        response = await api.upload_changes(run_id, changes.bundle, digest=digest)
        assert_refused(response, 422, "changes_invalid")
    response = await put_bundle(api, run_id, changes.bundle, api.worker_headers())
    assert_refused(response, 422, "changes_invalid")
    assert await stored_rows(db, run_id) == []


@pytest.mark.parametrize(
    "content_type", [None, "application/json", "application/octet-stream", "text/plain"]
)
async def test_only_a_git_bundle_media_type_is_taken(
    api: AppClient, seeded: SeededQueue, tmp_path: Path, content_type: str | None
) -> None:
    run_id = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, run_id)
    response = await api.upload_changes(run_id, changes.bundle, content_type=content_type)
    assert_refused(response, 415, "unsupported_media_type")


async def test_a_bundle_over_the_bound_is_413(
    app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    api: AppClient = await app_factory(ACTIVITY_CORE_CHANGES_MAX_BYTES=2048)
    run_id = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, run_id, commits=[{"briefs/big.md": "x" * 100_000}])
    big = changes.bundle + b"\0" * 4096  # incompressible enough either way
    assert len(big) > 2048
    assert_refused(await api.upload_changes(run_id, big), 413, "changes_too_large")

    # streamed without a Content-Length, the bound holds as well
    async def chunks() -> Any:
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    response = await api.http.put(
        f"/ops-runs/{run_id}/changes",
        params={"worker_id": WORKER_ID, "attempt": 1},
        content=chunks(),
        headers={
            **api.worker_headers(),
            "Content-Type": "application/x-git-bundle",
            "X-Changes-Digest": changes.digest,
        },
    )
    assert_refused(response, 413, "changes_too_large")
    assert await stored_rows(db, run_id) == []


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"worker_id": WORKER_ID},
        {"worker_id": WORKER_ID, "attempt": 0},
        {"worker_id": WORKER_ID, "attempt": "x"},
        {"worker_id": "bad id", "attempt": 1},
    ],
)
async def test_bad_query_parameters_are_invalid_request(
    api: AppClient, seeded: SeededQueue, params: dict[str, Any]
) -> None:
    run_id = await granted_claim(api, seeded)
    response = await put_bundle(
        api, run_id, b"# v2 git bundle\n", api.worker_headers(), params=params
    )
    assert_refused(response, 422, "invalid_request")


# -- the close ------------------------------------------------------------------------------


async def test_a_granted_complete_waits_for_its_changes(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    run_id = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, run_id)
    result = completion(GRANT, changes)
    refused = await api.complete(run_id, result)
    assert_refused(refused, 409, "changes_not_stored")
    row = await seeded.row(run_id)
    assert (row["state"], row["result"]) == ("claimed", None)
    assert (await api.upload_changes(run_id, changes.bundle)).status_code == 201
    done = await api.complete(run_id, result)
    assert done.status_code == 200, done.text
    assert done.json()["state"] == "succeeded"
    stored = done.json()["result"]["repository_transaction"]
    assert stored["changes_digest"] == changes.digest


async def test_a_fail_needs_no_changes(api: AppClient, seeded: SeededQueue) -> None:
    run_id = await granted_claim(api, seeded)
    response = await api.fail(run_id, error="rejected work")
    assert response.status_code == 200
    assert response.json()["state"] == "failed"


@pytest.mark.parametrize(
    "override",
    [
        {"changes_digest": "sha256:" + "0" * 64},
        {"changes_digest": None},
        {"baseline_digest": "f" * 40},
        {"head_after": "f" * 40},
        {"head_after": None},
        {"accepted_commits": ["f" * 40]},
    ],
    ids=["digest", "no-digest", "baseline", "head-after", "no-head-after", "commits"],
)
async def test_evidence_that_does_not_match_the_stored_changes_is_evidence_conflict(
    api: AppClient, seeded: SeededQueue, tmp_path: Path, override: dict[str, Any]
) -> None:
    run_id = await granted_claim(api, seeded)
    changes = make_changes(tmp_path, run_id)
    assert (await api.upload_changes(run_id, changes.bundle)).status_code == 201
    response = await api.complete(run_id, completion(GRANT, changes, **override))
    assert_refused(response, 409, "evidence_conflict")
    assert (await seeded.row(run_id))["state"] == "claimed"


async def test_the_changes_of_an_earlier_attempt_do_not_serve_a_later_one(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    run_id = await granted_claim(api, seeded)
    first = make_changes(tmp_path, run_id, attempt=1)
    assert (await api.upload_changes(run_id, first.bundle)).status_code == 201
    await seeded.expire_lease(run_id)
    [again] = (await api.claim()).json()["runs"]
    assert again["attempt"] == 2
    # attempt 1's changes are not attempt 2's
    assert_refused(await api.complete(run_id, completion(GRANT, first)), 409, "changes_not_stored")
    second = make_changes(tmp_path / "second", run_id, attempt=2)
    assert (await api.upload_changes(run_id, second.bundle, attempt=2)).status_code == 201
    assert (await api.complete(run_id, completion(GRANT, second))).status_code == 200
    assert [r["attempt"] for r in await stored_rows(db, run_id)] == [1, 2]


async def test_a_crash_between_upload_and_close(
    app_factory: Any, seeded: SeededQueue, tmp_path: Path
) -> None:
    """The upload is committed by one app; another one (a restarted replica, a new pool)
    takes the close."""
    first: AppClient = await app_factory()
    run_id = await granted_claim(first, seeded)
    changes = make_changes(tmp_path, run_id)
    assert (await first.upload_changes(run_id, changes.bundle)).status_code == 201
    second: AppClient = await app_factory()
    response = await second.complete(run_id, completion(GRANT, changes))
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "succeeded"


# -- retention ------------------------------------------------------------------------------


async def test_retention_deletes_the_changes_of_long_terminal_runs_only(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    made: dict[str, Changes] = {}
    ids: dict[str, uuid.UUID] = {}
    for name in ("old", "recent", "claimed"):
        ids[name] = await granted_claim(api, seeded)
        made[name] = make_changes(tmp_path / name, ids[name])
        assert (await api.upload_changes(ids[name], made[name].bundle)).status_code == 201
    for name in ("old", "recent"):
        assert (await api.complete(ids[name], completion(GRANT, made[name]))).status_code == 200
    long_ago = datetime.now().astimezone() - timedelta(days=91)
    for name in ("old", "claimed"):
        await db.execute("UPDATE ops_runs SET updated_at = $2 WHERE id = $1", ids[name], long_ago)
    await db.execute(
        "UPDATE ops_runs SET updated_at = $2 WHERE id = $1",
        ids["recent"],
        datetime.now().astimezone() - timedelta(days=89),
    )
    retention = api.app.state.changes_retention
    assert await retention.sweep() == 1
    assert await stored_rows(db, ids["old"]) == []
    assert len(await stored_rows(db, ids["recent"])) == 1
    assert len(await stored_rows(db, ids["claimed"])) == 1
    assert await retention.sweep() == 0


async def test_retention_sweeps_in_batches(
    app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    api: AppClient = await app_factory(ACTIVITY_CORE_CHANGES_RETENTION_DAYS=1)
    ids = []
    for n in range(3):
        run_id = await granted_claim(api, seeded)
        changes = make_changes(tmp_path / str(n), run_id)
        assert (await api.upload_changes(run_id, changes.bundle)).status_code == 201
        assert (await api.complete(run_id, completion(GRANT, changes))).status_code == 200
        ids.append(run_id)
    await db.execute(
        "UPDATE ops_runs SET updated_at = now() - interval '2 days' WHERE id = ANY($1)", ids
    )
    from activity_core.queue.changes_retention import ChangesRetention

    retention = ChangesRetention(
        api.app.state.pool, retention_days=1, metrics=api.app.state.metrics, batch=2
    )
    assert await retention.sweep() == 3
    assert await db.fetchval("SELECT count(*) FROM ops_run_changes") == 0


# -- the table keeps itself honest ----------------------------------------------------------


async def test_the_table_refuses_rows_that_break_its_checks(
    seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    run_id = await seeded.run(repository_grant=GRANT)
    good = ["sha256:" + "0" * 64, 3, "a" * 40, "b" * 40, ["b" * 40], ["x"], b"abc"]
    insert = (
        "INSERT INTO ops_run_changes (run_id, attempt, digest, size, baseline, head_after,"
        " commits, paths, bundle) VALUES ($1, 1, $2, $3, $4, $5, $6, $7, $8)"
    )
    for position, bad in [
        (0, "sha256:XYZ"),
        (0, "md5:" + "0" * 64),
        (1, 4),
        (2, "A" * 40),
        (3, "b" * 39),
        (4, []),
    ]:
        values = list(good)
        values[position] = bad
        with pytest.raises(asyncpg.CheckViolationError):
            await db.execute(insert, run_id, *values)
    await db.execute(insert, run_id, *good)


async def test_a_git_timeout_while_checking_is_503_unavailable_and_stores_nothing(
    app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection, tmp_path: Path
) -> None:
    """Our git running out of time says nothing about the bundle: a retryable 503, never
    the conclusive changes_invalid (the worker would quarantine a valid bundle)."""
    slow: AppClient = await app_factory(ACTIVITY_CORE_CHANGES_GIT_TIMEOUT_SECONDS=0.000001)
    run_id = await granted_claim(slow, seeded)
    changes = make_changes(tmp_path, run_id, commits=[{"briefs/a.md": "one\n"}])
    response = await slow.upload_changes(run_id, changes.bundle)
    assert_refused(response, 503, "unavailable")
    assert response.headers["Retry-After"] == "5"
    assert "retry" in response.json()["detail"]
    assert await stored_rows(db, run_id) == []
    # the same bytes on a node with time to check them are taken
    fast: AppClient = await app_factory()
    stored = await fast.upload_changes(run_id, changes.bundle)
    assert stored.status_code == 201, stored.text
