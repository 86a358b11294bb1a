"""GET /ops-runs/{id}/changes, .patch and .bundle on real PostgreSQL, with real bundles
made by the reference builder and read back with real git: the view's commits and files
(every status, a binary file, the +/- counts, the diffs), its bounds, who may read it,
and the patch (`git am` on the baseline) and the bundle (the stored bytes)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ac_changes import BINARY, HOSTILE_CONTENT, HOSTILE_NAME, ChangedRuns, store
from ac_testkit import OPERATOR_TOKEN, WORKER_TOKEN, AppClient, running_app
from activity_core.changes.view import MAX_FILE_DIFF_BYTES, MAX_FILES, MAX_TOTAL_DIFF_BYTES
from ops_testsupport.changes_bundles import IDENTITY, bundle_digest, commit_files, git

VIEWER_TOKEN = "viewer-token-for-the-changes-0123"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


OPERATOR = bearer(OPERATOR_TOKEN)
VIEWER = bearer(VIEWER_TOKEN)


@pytest.fixture
async def app(db_dsn: str, tmp_path: Path) -> AsyncIterator[AppClient]:
    operators = tmp_path / "operators.json"
    digest = "sha256:" + hashlib.sha256(VIEWER_TOKEN.encode()).hexdigest()
    operators.write_text(json.dumps({"operators": {"vera": {"token": digest, "role": "viewer"}}}))
    async with running_app(db_dsn, ACTIVITY_CORE_OPERATORS_FILE=str(operators)) as client:
        yield client


@pytest.fixture
def changed_runs(db: asyncpg.Connection, tmp_path: Path) -> ChangedRuns:
    return ChangedRuns(db, tmp_path)


def _files(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in body["files"]}


async def test_the_view_has_the_commits_and_every_kind_of_file_change(
    app: AppClient, changed_runs: ChangedRuns
) -> None:
    changed = await changed_runs.changed(
        [
            ({"notes/new.md": "one\ntwo\nthree\n", "README.md": "hello\nworld\n"}, "add notes"),
            (
                {
                    "gone.txt": None,
                    "old/name.txt": None,
                    "new/name.txt": "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nK\n",
                    "logo.png": BINARY,
                },
                "rename, delete, binary",
            ),
        ],
        setup={"gone.txt": "bye\n", "old/name.txt": "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n"},
    )
    response = await app.http.get(f"/ops-runs/{changed.run_id}/changes", headers=OPERATOR)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["run_id"] == str(changed.run_id)
    assert body["attempt"] == 1
    assert body["digest"] == bundle_digest(changed.bundle)
    assert body["size"] == len(changed.bundle)
    assert (body["baseline"], body["head_after"]) == (changed.baseline, changed.head_after)
    assert body["publication"] is None
    assert (body["truncated"], body["note"]) == (False, None)

    assert [c["sha"] for c in body["commits"]] == changed.commits  # oldest first
    assert [c["subject"] for c in body["commits"]] == ["add notes", "rename, delete, binary"]
    first = body["commits"][0]
    assert first["author_name"] == IDENTITY["GIT_AUTHOR_NAME"]
    assert first["author_email"] == IDENTITY["GIT_AUTHOR_EMAIL"]
    assert first["authored_at"].startswith("2026-01-01T00:00:00")

    files = _files(body)
    assert set(files) == {"notes/new.md", "README.md", "gone.txt", "new/name.txt", "logo.png"}
    added = files["notes/new.md"]
    assert (added["status"], added["additions"], added["deletions"]) == ("added", 3, 0)
    assert added["diff"] == "@@ -0,0 +1,3 @@\n+one\n+two\n+three\n"
    modified = files["README.md"]
    assert (modified["status"], modified["additions"], modified["deletions"]) == (
        "modified",
        1,
        0,
    )
    assert modified["diff"] == "@@ -1 +1,2 @@\n hello\n+world\n"
    deleted = files["gone.txt"]
    assert (deleted["status"], deleted["deletions"], deleted["diff"]) == (
        "deleted",
        1,
        "@@ -1 +0,0 @@\n-bye\n",
    )
    renamed = files["new/name.txt"]
    assert (renamed["status"], renamed["old_path"]) == ("renamed", "old/name.txt")
    assert (renamed["additions"], renamed["deletions"]) == (1, 1)
    assert "-k\n+K\n" in renamed["diff"]
    binary = files["logo.png"]
    assert (binary["status"], binary["binary"], binary["diff"]) == ("added", True, None)
    assert (binary["additions"], binary["deletions"], binary["truncated"]) == (0, 0, False)
    assert all(f["old_path"] is None for p, f in files.items() if p != "new/name.txt")


async def test_a_type_change_and_hostile_names_and_content_are_data(
    app: AppClient, changed_runs: ChangedRuns
) -> None:
    repo, baseline = changed_runs.repository()
    commit_files(repo, {"link": "target\n"}, "a file")
    baseline = git(repo, "rev-parse", "HEAD").decode().strip()
    (repo / "link").unlink()
    os.symlink("README.md", repo / "link")
    git(repo, "add", "link")
    commit_files(repo, {HOSTILE_NAME: HOSTILE_CONTENT, "tabs.c": "\tx;\f-y;\n"}, "hostile")
    tip = git(repo, "rev-parse", "HEAD").decode().strip()
    run_id = await changed_runs.run()
    from ops_testsupport.changes_bundles import build_changes_bundle

    bundle = build_changes_bundle(repo, baseline, tip, str(run_id), 1)
    await store(changed_runs.conn, run_id, 1, bundle, baseline, tip, [tip])
    body = (await app.http.get(f"/ops-runs/{run_id}/changes", headers=OPERATOR)).json()
    files = _files(body)
    assert files["link"]["status"] == "type_changed"
    # git writes a type change as a deletion and a creation: both hunks, no second header
    assert files["link"]["diff"] == (
        "@@ -1 +0,0 @@\n-target\n@@ -0,0 +1 @@\n+README.md\n\\ No newline at end of file\n"
    )
    assert files[HOSTILE_NAME]["diff"] == "@@ -0,0 +1 @@\n+" + HOSTILE_CONTENT
    assert files["tabs.c"]["diff"] == "@@ -0,0 +1 @@\n+\tx;\f-y;\n"


async def test_past_a_files_bound_the_diff_is_cut_and_the_note_says_why(
    app: AppClient, changed_runs: ChangedRuns
) -> None:
    line = "x" * 99 + "\n"
    big = line * (MAX_FILE_DIFF_BYTES // 100 + 50)
    changed = await changed_runs.changed([({"big.txt": big, "small.txt": "s\n"}, "big")])
    body = (await app.http.get(f"/ops-runs/{changed.run_id}/changes", headers=OPERATOR)).json()
    files = _files(body)
    cut = files["big.txt"]
    assert cut["truncated"] is True
    assert cut["additions"] == big.count("\n")  # the counts are the whole file's
    assert len(cut["diff"].encode()) <= MAX_FILE_DIFF_BYTES
    assert cut["diff"].endswith("\n")  # cut at a line's end
    assert files["small.txt"] == {
        **files["small.txt"],
        "truncated": False,
        "diff": "@@ -0,0 +1 @@\n+s\n",
    }
    assert body["truncated"] is True
    assert body["note"] == f"a file's diff is shown up to {MAX_FILE_DIFF_BYTES} bytes"


async def test_past_the_total_and_the_number_of_files_the_view_is_cut(
    app: AppClient, changed_runs: ChangedRuns
) -> None:
    line = "y" * 99 + "\n"
    chunk = line * ((MAX_FILE_DIFF_BYTES - 1024) // 100)
    many: dict[str, str | bytes | None] = {
        f"f{i:03}.txt": chunk if i < 20 else f"{i}\n" for i in range(MAX_FILES + 5)
    }
    changed = await changed_runs.changed([(many, "many")])
    body = (await app.http.get(f"/ops-runs/{changed.run_id}/changes", headers=OPERATOR)).json()
    assert len(body["files"]) == MAX_FILES
    shown = sum(len((f["diff"] or "").encode()) for f in body["files"])
    assert shown <= MAX_TOTAL_DIFF_BYTES
    assert [f["truncated"] for f in body["files"][:15]] == [False] * 15
    assert body["files"][17]["truncated"] is True
    assert body["files"][19]["diff"] is None
    assert body["files"][-1]["diff"] is None and body["files"][-1]["truncated"] is True
    assert body["truncated"] is True
    assert body["note"] == (
        f"the diffs are shown up to {MAX_TOTAL_DIFF_BYTES} bytes in all; "
        f"{MAX_FILES + 5} files changed: the first {MAX_FILES} are shown"
    )


async def test_a_viewer_reads_the_changes_nobody_else_does(
    app: AppClient, changed_runs: ChangedRuns
) -> None:
    changed = await changed_runs.changed([({"a.md": "a\n"}, "a")])
    for suffix in ("changes", "changes.patch", "changes.bundle"):
        path = f"/ops-runs/{changed.run_id}/{suffix}"
        assert (await app.http.get(path, headers=VIEWER)).status_code == 200, suffix
        refused = await app.http.get(path)
        assert refused.status_code == 401, suffix
        assert refused.json()["code"] == "unauthenticated"
        worker = await app.http.get(path, headers=bearer(WORKER_TOKEN))
        assert (worker.status_code, worker.json()["code"]) == (403, "forbidden"), suffix
        unknown = await app.http.get(path, headers=bearer("no-such-token-0123456789"))
        assert unknown.status_code == 401, suffix


async def test_without_stored_changes_of_the_current_attempt_it_is_not_found(
    app: AppClient, changed_runs: ChangedRuns
) -> None:
    plain = await changed_runs.run()
    # a row of attempt 1 while the run is at attempt 2: that work never closed
    earlier = await changed_runs.changed([({"a.md": "a\n"}, "a")], attempt=1, run_attempt=2)
    for run_id in (plain, earlier.run_id, uuid.uuid4()):
        for suffix in ("changes", "changes.patch", "changes.bundle"):
            response = await app.http.get(f"/ops-runs/{run_id}/{suffix}", headers=OPERATOR)
            assert response.status_code == 404, (run_id, suffix)
            assert response.json()["code"] == "not_found"
    bad = await app.http.get("/ops-runs/not-a-uuid/changes", headers=OPERATOR)
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_request")


async def test_a_stored_bundle_git_cannot_read_is_changes_invalid_not_a_500(
    app: AppClient, changed_runs: ChangedRuns
) -> None:
    good = await changed_runs.changed([({"a.md": "a\n"}, "a")])
    run_id = await changed_runs.run()
    header_end = good.bundle.index(b"\n\n") + 2
    broken = good.bundle[:header_end] + b"PACK" + b"\x00" * 40
    await store(
        changed_runs.conn, run_id, 1, broken, good.baseline, good.head_after, [good.head_after]
    )
    for suffix in ("changes", "changes.patch"):
        response = await app.http.get(f"/ops-runs/{run_id}/{suffix}", headers=OPERATOR)
        assert response.status_code == 422, response.text
        assert response.json()["code"] == "changes_invalid"
        assert "cannot be read with git" in response.json()["detail"]
    # the bytes themselves are still there to take away
    kept = await app.http.get(f"/ops-runs/{run_id}/changes.bundle", headers=OPERATOR)
    assert (kept.status_code, kept.content) == (200, broken)


async def test_the_patch_applies_with_git_am_on_the_baseline_and_the_bundle_is_the_stored_bytes(
    app: AppClient, changed_runs: ChangedRuns, tmp_path: Path
) -> None:
    changed = await changed_runs.changed(
        [
            ({"notes/a.md": "alpha\n", "logo.png": BINARY}, "first"),
            ({"notes/a.md": "alpha\nbeta\n", "README.md": None}, "second: with a body\n\nwhy"),
        ]
    )
    patch = await app.http.get(f"/ops-runs/{changed.run_id}/changes.patch", headers=OPERATOR)
    assert patch.status_code == 200
    assert patch.headers["content-type"] == "application/mbox"
    assert patch.headers["x-changes-digest"] == bundle_digest(changed.bundle)
    assert patch.content.startswith(b"From " + changed.commits[0].encode())

    clone = tmp_path / "clone"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({**IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"})

    def run(*args: str, cwd: Path = clone, stdin: bytes | None = None) -> bytes:
        return subprocess.run(
            list(args), cwd=cwd, input=stdin, env=env, capture_output=True, check=True
        ).stdout

    run("git", "clone", "--quiet", str(changed.repo), str(clone), cwd=tmp_path)
    run("git", "checkout", "--quiet", "--detach", changed.baseline)
    run("git", "am", "--quiet", stdin=patch.content)
    # the same trees, commit by commit (authors and dates kept; the committer is am's)
    applied = run("git", "rev-list", "--reverse", f"{changed.baseline}..HEAD").decode().split()
    assert len(applied) == 2
    for mine, theirs in zip(applied, changed.commits, strict=True):
        assert run("git", "rev-parse", f"{mine}^{{tree}}") == run(
            "git", "rev-parse", f"{theirs}^{{tree}}"
        )
    assert run("git", "log", "-1", "--format=%B").decode().startswith("second: with a body\n\nwhy")

    bundle = await app.http.get(f"/ops-runs/{changed.run_id}/changes.bundle", headers=VIEWER)
    assert bundle.status_code == 200
    assert bundle.content == changed.bundle
    assert bundle.headers["content-type"] == "application/x-git-bundle"
    assert bundle.headers["content-disposition"] == (
        f'attachment; filename="rein-{changed.run_id}-1.bundle"'
    )
    path = tmp_path / "changes.bundle"
    path.write_bytes(bundle.content)
    run("git", "bundle", "verify", "--quiet", str(path))
    run("git", "fetch", "--quiet", str(path), f"refs/heads/rein/{changed.run_id}/1:refs/heads/got")
    assert run("git", "rev-parse", "got").decode().strip() == changed.head_after


async def test_paths_with_tabs_newlines_quotes_and_bytes_that_are_not_utf8(
    app: AppClient, changed_runs: ChangedRuns
) -> None:
    latin1 = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    odd = 'a\tb "c"\nd.txt'
    changed = await changed_runs.changed([({odd: "1\n", latin1: "2\n"}, "odd names")])
    body = (await app.http.get(f"/ops-runs/{changed.run_id}/changes", headers=OPERATOR)).json()
    paths = [f["path"] for f in body["files"]]
    # git's bytes exactly where they are UTF-8, U+FFFD where they are not
    assert sorted(paths) == sorted([odd, "caf\ufffd.txt"])
    assert all(f["additions"] == 1 and f["status"] == "added" for f in body["files"])


async def test_a_sha256_repositorys_changes_are_read_the_same_way(
    app: AppClient, changed_runs: ChangedRuns, tmp_path: Path
) -> None:
    changed = await changed_runs.changed(
        [({"notes/a.md": "a\n"}, "sha-256")], object_format="sha256"
    )
    assert len(changed.head_after) == 64
    body = (await app.http.get(f"/ops-runs/{changed.run_id}/changes", headers=OPERATOR)).json()
    assert [c["sha"] for c in body["commits"]] == changed.commits
    assert _files(body)["notes/a.md"]["diff"] == "@@ -0,0 +1 @@\n+a\n"
    patch = await app.http.get(f"/ops-runs/{changed.run_id}/changes.patch", headers=OPERATOR)
    assert patch.status_code == 200
    assert patch.content.startswith(b"From " + changed.commits[0].encode())


async def test_a_derivation_past_its_overall_deadline_is_503_unavailable(
    db_dsn: str, app: AppClient, changed_runs: ChangedRuns
) -> None:
    """One deadline over the whole derivation (not per git call): past it the node is too
    slow, which says nothing about the bundle: 503 with Retry-After, and nothing cached
    (the next read on a node with time answers the view)."""
    changed = await changed_runs.changed([({"a.md": "a\n"}, "a")])
    async with running_app(db_dsn, ACTIVITY_CORE_CHANGES_VIEW_DEADLINE_SECONDS="0.000001") as slow:
        for suffix in ("changes", "changes.patch"):
            response = await slow.http.get(f"/ops-runs/{changed.run_id}/{suffix}", headers=OPERATOR)
            assert response.status_code == 503, response.text
            assert response.json()["code"] == "unavailable"
            assert response.headers["Retry-After"] == "5"
            assert "retry" in response.json()["detail"]
        bundle = await slow.http.get(f"/ops-runs/{changed.run_id}/changes.bundle", headers=OPERATOR)
        assert (bundle.status_code, bundle.content) == (200, changed.bundle)
    shown = await app.http.get(f"/ops-runs/{changed.run_id}/changes", headers=OPERATOR)
    assert shown.status_code == 200, shown.text
    assert shown.json()["head_after"] == changed.head_after
