"""`activity-core runs` against a real `activity-core serve` process on the test database:
each command's table and JSON, and its exit codes (0 done, 1 refused, 2 usage or
configuration, 3 unreachable, 4 credential refused)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ac_serve import Done, operator_cli, serve_env, serve_process
from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, SeededQueue
from activity_core.operator.cli import main
from activity_core.temporal.dev_server import free_port

VIEWER_TOKEN = "viewer-token-for-the-cli-test-0123"


@pytest.fixture
async def served(db_dsn: str, tmp_path: Path) -> AsyncIterator[str]:
    operators = tmp_path / "operators.json"
    digest = "sha256:" + hashlib.sha256(VIEWER_TOKEN.encode()).hexdigest()
    operators.write_text(json.dumps({"operators": {"vera": {"token": digest, "role": "viewer"}}}))
    env = serve_env(
        db_dsn,
        ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ACTIVITY_CORE_WORKER_TOKEN=WORKER_TOKEN,
        ACTIVITY_CORE_WORKER_ID=WORKER_ID,
        ACTIVITY_CORE_OPERATORS_FILE=str(operators),
    )
    async with serve_process(env) as (_, url):
        yield url


async def runs(url: str | None, *argv: str, token: str | None = OPERATOR_TOKEN, **env: str) -> Done:
    return await operator_cli(main, url, *argv, token=token, **env)


async def test_list_show_explain_summary_and_workers(served: str, seeded: SeededQueue) -> None:
    now = datetime.now(UTC)
    failed = await seeded.run(
        state="failed", claim_owner=WORKER_ID, attempt=3, last_error="llm timeout"
    )
    held = await seeded.run(
        state="claimed", claim_owner=WORKER_ID, lease_until=now + timedelta(hours=1), attempt=1
    )
    waiting = await seeded.run(priority="high")

    listed = await runs(served, "list")
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "STATE", "ATTEMPT", "PRIORITY", "OWNER", "CREATED", "TITLE"]
    assert {line.split()[0] for line in lines[1:]} == {str(failed), str(held), str(waiting)}
    as_json = await runs(served, "list", "--state", "claimed", "--worker", WORKER_ID, "--json")
    assert [run["id"] for run in as_json.json()["runs"]] == [str(held)]
    paged = await runs(served, "list", "--limit", "1")
    assert len(paged.out.splitlines()) == 2
    assert paged.err.startswith("more: --cursor ")

    dead = await runs(served, "list", "--dead-letter")
    assert dead.code == 0
    assert dead.out.splitlines()[1].split()[:4] == [str(failed), "failed", "3", "test-activity"]
    assert "llm timeout" in dead.out

    shown = await runs(served, "show", str(failed))
    assert shown.code == 0
    assert "last_error              llm timeout" in shown.out
    assert (await runs(served, "show", str(failed), "--json")).json()["id"] == str(failed)

    explained = await runs(served, "explain", str(waiting))
    assert explained.code == 0
    assert explained.out.splitlines()[0] == f"{waiting}  open"
    # its one worker holds a run under a live lease: alive, and busy
    assert "  matching_workers_busy: " in explained.out

    summary = await runs(served, "summary")
    assert summary.code == 0
    assert summary.out.startswith("open 1  claimed 1  stalled 0\n")
    workers = await runs(served, "workers", "--json")
    assert workers.json()["workers"][0]["holding"] == [str(held)]


async def test_requeue_and_cancel_with_their_exit_codes(served: str, seeded: SeededQueue) -> None:
    failed = await seeded.run(state="failed", claim_owner=WORKER_ID, attempt=3)
    expired = await seeded.run(state="expired", claim_owner=WORKER_ID, attempt=3)
    open_run = await seeded.run()

    first = await runs(served, "requeue", str(failed))
    assert first.code == 0, first.err
    successor = first.out.split()[-1]
    assert first.out == f"{failed}  requeued as {successor}\n"
    again = await runs(served, "requeue", str(failed))
    assert (again.code, again.out) == (0, f"{failed}  already requeued as {successor}\n")
    keyed = await runs(served, "requeue", str(failed), "--key", "second-try", "--json")
    assert keyed.code == 0
    assert keyed.json()["results"][0]["successor"]["id"] != successor

    refused = await runs(served, "requeue", str(open_run))
    assert refused.code == 1
    assert refused.err.startswith("activity-core runs: activity-core answered 409 state_conflict:")

    bulk = await runs(served, "requeue", str(expired), str(open_run))
    assert bulk.code == 1
    assert bulk.out.splitlines()[0].startswith(f"{expired}  requeued as ")
    assert bulk.out.splitlines()[1].startswith(f"{open_run}  refused 409 state_conflict: ")

    cancelled = await runs(served, "cancel", str(open_run), "--reason", "not this week")
    assert cancelled.code == 0, cancelled.err
    assert cancelled.out == (
        f"{open_run}  cancelled: failed; cancelled by operator operator while it was open: "
        "not this week\n"
    )
    invisible = await seeded.run()
    for reason in ("\u200b\u200b", "   ", "\u2060"):
        blank = await runs(served, "cancel", str(invisible), "--reason", reason)
        assert blank.code == 1
        assert blank.err.startswith("activity-core runs: activity-core answered 422 invalid_")
    assert (await seeded.row(invisible))["state"] == "open"
    twice = await runs(served, "cancel", str(open_run), "--reason", "again")
    assert twice.code == 1
    assert "state_conflict" in twice.err
    missing = await runs(served, "show", "00000000-0000-4000-8000-000000000000")
    assert missing.code == 1
    assert "404 not_found" in missing.err


async def test_a_viewer_reads_but_its_actions_exit_4(served: str, seeded: SeededQueue) -> None:
    failed = await seeded.run(state="failed", claim_owner=WORKER_ID, attempt=3)
    assert (await runs(served, "list", token=VIEWER_TOKEN)).code == 0
    refused = await runs(served, "requeue", str(failed), token=VIEWER_TOKEN)
    assert refused.code == 4
    assert "403 forbidden: vera is a viewer" in refused.err
    assert (await runs(served, "list", token="wrong-token-0123456789abcdef")).code == 4
    assert (await runs(served, "list", token=WORKER_TOKEN)).code == 4


async def test_the_token_file_and_configuration_errors(
    served: str, seeded: SeededQueue, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(OPERATOR_TOKEN + "\n")
    from_file = await runs(
        served, "summary", token=None, ACTIVITY_CORE_OPERATOR_TOKEN_FILE=str(token_file)
    )
    assert from_file.code == 0, from_file.err

    cases = [
        (await runs(served, "list", token=None), "no operator token"),
        (
            await runs(
                served, "list", token=None, ACTIVITY_CORE_OPERATOR_TOKEN_FILE=str(tmp_path / "no")
            ),
            "cannot read",
        ),
        (await runs(served, "show", "not-a-run"), "not a run id"),
        (await runs(served, "frobnicate"), "invalid choice"),
        (await runs(served, "cancel", str(await seeded.run())), "--reason"),
        (await runs("ftp://example", "list"), "not an http(s) URL"),
    ]
    for done, said in cases:
        assert done.code == 2, (said, done.err)
        assert said in done.err, done.err
        assert len(done.err.strip().splitlines()) == 1

    unreachable = await runs(f"http://127.0.0.1:{free_port()}", "list")
    assert unreachable.code == 3
    assert unreachable.err.startswith("activity-core runs: activity-core is not reachable at ")
