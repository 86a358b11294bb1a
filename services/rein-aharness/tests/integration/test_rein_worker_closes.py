"""Exactly once, worker side: every heartbeat and close carries the claim attempt it
belongs to (fencing), records of the previous outbox version replay with the attempt
their transaction id names, and no single outbox entry stops the worker claiming.

Against activity-core in-process on real PostgreSQL, like test_rein_worker.py.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ops_contracts import canonical_json
from rein_aharness.operator.commands import status_command
from rein_aharness.operator.exit_codes import ExitCode
from rein_aharness.outbox import OutboxStore
from rein_worker_kit import (
    GRANT,
    WORKER_ID,
    ActivityCore,
    RecordingTransport,
    Repos,
    command_profile,
    outbox,
    pending_complete,
    run_worker_once,
    worker_settings,
    write_catalogue,
)

OTHER_WORKER = "rein-aharness@previous-id"
PREVIOUS_FORMAT = "rein-aharness/close-outbox-entry/v1"  # what the outbox wrote before
_COMMIT = "git add -A && git commit -qm work"


async def _claim(activity_core: ActivityCore, label: str) -> uuid.UUID:
    """Claim the run labelled `label` as WORKER_ID (as a worker did before a crash)."""
    [run] = await activity_core.claim_as_worker(label)
    return uuid.UUID(run["id"])


def _as_previous_version(store: OutboxStore, key: str) -> None:
    """Rewrite a pending entry exactly as the outbox wrote it before the attempt was
    stored: format v1, no `attempt` key, canonical JSON."""
    path = store.paths.pending / f"{key}.json"
    record = json.loads(path.read_bytes())
    del record["attempt"]
    record["format"] = PREVIOUS_FORMAT
    path.write_bytes(canonical_json(record))


# -- fencing: the attempt on the wire --------------------------------------------------------


async def test_heartbeats_and_the_outboxed_close_carry_the_claimed_attempt(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repos.make()
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml",
        command_profile("steady", f"sleep 1.5; echo x > briefs/steady.md && {_COMMIT}"),
    )
    settings = worker_settings(tmp_path, repos, catalogue, rein_aharness_lease_seconds=3)
    # an earlier attempt ended: this claim is attempt 2
    run_id = await activity_core.seeded.run(
        harness_profile_ref="harness.steady@1.0.0", repository_grant=GRANT, attempt=1
    )
    transport = RecordingTransport(activity_core.transport())

    await run_worker_once(settings, transport)

    row = await activity_core.row(run_id)
    assert (row["state"], row["attempt"]) == ("succeeded", 2)
    heartbeats = transport.sent("/heartbeat")
    assert heartbeats and all(body["attempt"] == 2 for body in heartbeats)
    [complete] = transport.sent("/complete")
    assert complete["attempt"] == 2 and complete["worker_id"] == WORKER_ID
    [delivered] = outbox(settings).paths.delivered.iterdir()
    record = json.loads(delivered.read_bytes())
    assert (record["attempt"], record["transaction_id"]) == (2, f"rtx-{run_id}.2")
    # the attempt is not part of the digested intent: activity-core, which digests the
    # intent it received without the attempt, stored the very digest the outbox keeps
    assert "attempt" not in record["intent"]
    assert record["intent_digest"] == row["close_intent_digest"]


async def test_a_direct_close_carries_the_claimed_attempt(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repos.make()
    legacy = (
        "legacy_approaches:\n"
        "  legacy-ok:\n"
        "    approach: command\n"
        '    command: {argv: ["true"], timeout_s: 30, env_allowlist: [PATH]}\n'
    )
    settings = worker_settings(
        tmp_path, repos, write_catalogue(tmp_path / "profiles.yaml", legacy=legacy)
    )
    run_id = await activity_core.seeded.run(
        harness_profile_ref=None, approach_hint="legacy-ok", attempt=2
    )
    transport = RecordingTransport(activity_core.transport())

    runtime = await run_worker_once(settings, transport)

    [report] = runtime.worker.reports
    assert report.close is not None and report.close.path == "direct"
    assert (await activity_core.row(run_id))["state"] == "succeeded"
    [complete] = transport.sent("/complete")
    assert complete["attempt"] == 3


async def test_a_replayed_pending_entry_carries_its_attempt(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repos.make()
    settings = worker_settings(tmp_path, repos)
    await activity_core.seeded.run(labels=["earlier"], harness_profile_ref=None, attempt=1)
    run_id = await _claim(activity_core, "earlier")
    store = outbox(settings)
    store.enqueue_close(
        run_id=str(run_id),
        transaction_id=f"rtx-{run_id}.2",
        worker_id=WORKER_ID,
        action="fail",
        result=None,
        error="the worker stopped",
        reopen=True,
        attempt=2,
    )
    transport = RecordingTransport(activity_core.transport())

    await run_worker_once(settings, transport)

    assert transport.calls[0] == f"POST /ops-runs/{run_id}/fail"
    assert transport.sent("/fail")[0] == {
        "worker_id": WORKER_ID,
        "error": "the worker stopped",
        "reopen": True,
        "attempt": 2,
    }
    assert store.snapshot().pending == ()
    [delivered] = store.paths.delivered.iterdir()
    record = json.loads(delivered.read_bytes())
    assert (record["attempt"], record["disposition"]) == (2, "reopened")


async def test_records_of_the_previous_version_replay_with_the_attempt_they_name(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    """A v1 record (no stored attempt) is delivered, not quarantined: with the attempt its
    worker transaction id names, or with none when its transaction id has another shape."""
    repos.make()
    settings = worker_settings(tmp_path, repos)
    await activity_core.seeded.run(labels=["shaped"], harness_profile_ref=None)
    await activity_core.seeded.run(labels=["other"], harness_profile_ref=None)
    shaped = await _claim(activity_core, "shaped")
    other = await _claim(activity_core, "other")
    store = outbox(settings)
    result = {"ok": True, "target_repo": "research/briefs", "committed": False}
    for run_id, transaction_id in ((shaped, f"rtx-{shaped}.1"), (other, "txn-from-elsewhere")):
        key = store.enqueue_close(
            run_id=str(run_id),
            transaction_id=transaction_id,
            worker_id=WORKER_ID,
            action="complete",
            result=result,
        ).record.key
        _as_previous_version(store, key)
    assert [entry.reason for entry in store.snapshot().pending] == [None, None]
    transport = RecordingTransport(activity_core.transport())

    await run_worker_once(settings, transport)

    bodies = dict(zip(transport.paths("/complete"), transport.sent("/complete"), strict=True))
    assert bodies[f"POST /ops-runs/{shaped}/complete"]["attempt"] == 1
    assert "attempt" not in bodies[f"POST /ops-runs/{other}/complete"]
    assert (await activity_core.row(shaped))["state"] == "succeeded"
    assert (await activity_core.row(other))["state"] == "succeeded"
    snapshot = store.snapshot()
    assert (snapshot.pending, snapshot.quarantined, snapshot.delivered_count) == ((), (), 2)


@pytest.mark.parametrize("written_by", ["this-version", "the-previous-version"])
async def test_a_close_of_an_attempt_no_longer_current_is_fenced_off_and_quarantined(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, written_by: str
) -> None:
    """Attempt 1's close is still pending when the same worker identity holds attempt 2
    (its lease ended, it claimed the run again): owner and lease match, only the attempt
    tells them apart. Activity Core refuses it (expired_lease) and attempt 2 is untouched."""
    repos.make()
    settings = worker_settings(tmp_path, repos)
    await activity_core.seeded.run(labels=["again"], harness_profile_ref=None)
    run_id = await _claim(activity_core, "again")
    await activity_core.seeded.expire_lease(run_id)
    assert await _claim(activity_core, "again") == run_id
    held = await activity_core.row(run_id)
    assert (held["attempt"], held["claim_owner"]) == (2, WORKER_ID)
    store = outbox(settings)
    key = pending_complete(store, run_id, attempt=1)
    if written_by == "the-previous-version":
        _as_previous_version(store, key)
    transport = RecordingTransport(activity_core.transport())

    await run_worker_once(settings, transport)

    assert [body["attempt"] for body in transport.sent("/complete")] == [1]
    row = await activity_core.row(run_id)
    assert (row["state"], row["attempt"], row["result"], row["updated_at"]) == (
        "claimed",
        2,
        None,
        held["updated_at"],
    )
    [entry] = store.snapshot().quarantined
    assert (entry.run_id, entry.reason, entry.code) == (
        str(run_id),
        "conclusive_refusal",
        "expired_lease",
    )


# -- one entry never stops the worker ----------------------------------------------------------


async def test_an_entry_of_another_worker_identity_is_quarantined_and_the_worker_goes_on(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's id changed while a close was pending: activity-core would refuse it
    (403) for the new credentials forever. The worker never sends it, quarantines it with
    its reason, and claims and completes work."""
    repos.make()
    settings = worker_settings(tmp_path, repos)
    # held by the worker's previous identity, whose close waits in the outbox
    stranded = await activity_core.seeded.run(
        labels=["elsewhere"],
        harness_profile_ref=None,
        state="claimed",
        claim_owner=OTHER_WORKER,
        lease_until=datetime.now(UTC) + timedelta(minutes=10),
        attempt=1,
    )
    store = outbox(settings)
    pending_complete(store, stranded, worker_id=OTHER_WORKER)
    work = await activity_core.granted_run("brief")
    transport = RecordingTransport(activity_core.transport())

    with caplog.at_level(logging.WARNING, logger="rein_aharness"):
        runtime = await run_worker_once(settings, transport)

    assert not any(str(stranded) in call for call in transport.calls)  # never sent
    assert transport.calls[0] == "POST /ops-runs/claim"
    [report] = runtime.worker.reports
    assert report.close is not None and report.close.disposition == "applied"
    assert (await activity_core.row(work))["state"] == "succeeded"
    assert (await activity_core.row(stranded))["state"] == "claimed"  # its lease will end
    assert any(
        r.getMessage().startswith("close quarantined: recorded under another worker identity")
        and getattr(r, "run_id", None) == str(stranded)
        for r in caplog.records
    )

    out = io.StringIO()
    assert status_command(settings, as_json=True, out=out) == ExitCode.QUARANTINED
    report_json = json.loads(out.getvalue())
    assert report_json["counts"] == {"pending": 0, "delivered": 1, "quarantined": 1}
    [entry] = report_json["entries"]
    assert (
        entry["state"],
        entry["run_id"],
        entry["worker_id"],
        entry["run_attempt"],
        entry["reason"],
    ) == ("quarantined", str(stranded), OTHER_WORKER, 1, "foreign_worker_identity")
    table = io.StringIO()
    status_command(settings, as_json=False, out=table)
    [line] = [line for line in table.getvalue().splitlines() if str(stranded) in line]
    assert OTHER_WORKER in line and "foreign_worker_identity" in line


async def test_refused_credentials_of_its_own_identity_stop_the_pass_and_every_claim(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 401 for an entry of the worker's own identity is its credentials: a claim would
    meet it too, so nothing is claimed and the entry stays pending for when they work."""
    repos.make()
    settings = worker_settings(
        tmp_path,
        repos,
        activity_core_worker_token="a-rotated-token-0123456789",
    )
    run_id = await activity_core.seeded.run(labels=["earlier"], harness_profile_ref=None)
    store = outbox(settings)
    pending_complete(store, run_id, result={"ok": True})
    waiting = await activity_core.granted_run("brief")
    transport = RecordingTransport(activity_core.transport())

    with caplog.at_level(logging.WARNING, logger="rein_aharness"):
        await run_worker_once(settings, transport)

    assert transport.calls == [f"POST /ops-runs/{run_id}/complete"]
    [pending] = store.snapshot().pending
    assert (pending.run_id, pending.last_failure_class) == (str(run_id), "QueueAuthError")
    assert store.snapshot().quarantined == ()
    assert (await activity_core.row(waiting))["state"] == "open"
    assert any(
        "refused this worker's credentials" in r.getMessage()
        and "ACTIVITY_CORE_WORKER_TOKEN" in r.getMessage()
        for r in caplog.records
    )
