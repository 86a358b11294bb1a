"""`activity-core runs changes` against a real `activity-core serve` process: the summary,
`--json` (the API's body), `--patch` (the mbox, which git am applies), and the exit codes
of the other runs commands (1 not_found, 2 usage, 4 a worker's token)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from ac_changes import BINARY, ChangedRuns
from ac_serve import Done, serve_env, serve_process
from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN
from activity_core.operator.cli import main
from ops_testsupport.changes_bundles import IDENTITY


@pytest.fixture
async def served(db_dsn: str) -> AsyncIterator[str]:
    env = serve_env(
        db_dsn,
        ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ACTIVITY_CORE_WORKER_TOKEN=WORKER_TOKEN,
        ACTIVITY_CORE_WORKER_ID=WORKER_ID,
    )
    async with serve_process(env) as (_, url):
        yield url


def _out() -> tuple[io.TextIOWrapper, io.BytesIO]:
    """A text stream over a binary buffer, as sys.stdout is: --patch writes bytes."""
    raw = io.BytesIO()
    return io.TextIOWrapper(raw, encoding="utf-8", write_through=True), raw


async def runs(url: str, *argv: str, token: str = OPERATOR_TOKEN) -> tuple[Done, bytes]:
    environ = {"NO_PROXY": "*", "ACTIVITY_CORE_API_URL": url, "ACTIVITY_CORE_OPERATOR_TOKEN": token}
    (out, raw), err = _out(), io.StringIO()
    code = await asyncio.to_thread(main, list(argv), environ=environ, out=out, err=err)
    out.flush()
    data = raw.getvalue()
    return Done(code, data.decode("utf-8", "replace"), err.getvalue()), data


async def test_runs_changes_prints_the_summary_the_json_and_the_patch(
    served: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    changed_runs = ChangedRuns(db, tmp_path)
    changed = await changed_runs.changed(
        [
            ({"notes/a.md": "one\ntwo\n", "logo.png": BINARY}, "add notes"),
            ({"README.md": None, "notes/a.md": "one\n"}, "drop the readme\x1b[31m"),
        ]
    )
    run_id = str(changed.run_id)
    summary, _ = await runs(served, "changes", run_id)
    assert summary.code == 0, summary.err
    lines = summary.out.splitlines()
    assert lines[0] == (
        f"{run_id}  attempt 1: 2 commits on {changed.baseline[:12]}, tip {changed.head_after[:12]}"
    )
    author = f"({IDENTITY['GIT_AUTHOR_NAME']} <{IDENTITY['GIT_AUTHOR_EMAIL']}>, 2026-01-01)"
    assert lines[1] == f"  {changed.commits[0][:12]}  add notes  {author}"
    # a control character in a subject never reaches the terminal
    assert lines[2] == f"  {changed.commits[1][:12]}  drop the readme\ufffd[31m  {author}"
    table = [line.split() for line in lines[4:]]
    assert table == [
        ["STATUS", "+", "-", "PATH"],
        ["deleted", "+0", "-1", "README.md"],
        ["added", "bin", "bin", "logo.png"],
        ["added", "+1", "-0", "notes/a.md"],
    ]

    as_json, _ = await runs(served, "changes", run_id, "--json")
    assert as_json.code == 0
    body = json.loads(as_json.out)
    assert [c["sha"] for c in body["commits"]] == changed.commits
    assert body["publication"] is None

    patched, patch = await runs(served, "changes", run_id, "--patch")
    assert patched.code == 0, patched.err
    assert patch.startswith(b"From " + changed.commits[0].encode())
    clone = tmp_path / "clone"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({**IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"})
    for args in (
        ["git", "clone", "--quiet", str(changed.repo), str(clone)],
        ["git", "-C", str(clone), "checkout", "--quiet", "--detach", changed.baseline],
    ):
        subprocess.run(args, env=env, check=True, capture_output=True)
    subprocess.run(["git", "-C", str(clone), "am", "--quiet"], input=patch, env=env, check=True)
    tree = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "HEAD^{tree}", f"{changed.head_after}^{{tree}}"],
        env=env,
        check=True,
        capture_output=True,
    ).stdout.split()
    assert tree[0] == tree[1]


async def test_runs_changes_exit_codes(served: str, db: asyncpg.Connection, tmp_path: Path) -> None:
    plain = await ChangedRuns(db, tmp_path).run()
    missing, _ = await runs(served, "changes", str(plain))
    assert missing.code == 1
    assert "404 not_found" in missing.err
    patch_missing, _ = await runs(served, "changes", str(plain), "--patch")
    assert patch_missing.code == 1 and "404 not_found" in patch_missing.err
    usage, _ = await runs(served, "changes", "not-a-run")
    assert usage.code == 2
    both, _ = await runs(served, "changes", str(plain), "--patch", "--json")
    assert both.code == 2
    worker, _ = await runs(served, "changes", str(plain), token=WORKER_TOKEN)
    assert worker.code == 4 and "403 forbidden" in worker.err
