"""activity-core (serve and its Temporal worker) and PostgreSQL are restarted while two
workers are in the middle of their runs: no run is lost, none is executed twice, and the
workers recover on their own (no restart, no operator call).

PostgreSQL can only be restarted when the test owns it, so this module runs its own
deployment on a dedicated embedded server (whatever TEST_DATABASE_URL says), sharing
the session's Temporal server on a task queue of its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_kit.git import commits_on, landing_branches
from e2e_kit.scenarios import RESTART_DEFINITIONS, write_definitions
from e2e_kit.stack import SharedPeers, Stack, approaches, log_lines, outbox, ui_facts
from ops_demo.postgres import EmbeddedPostgres
from ops_demo.repository import git
from ops_devsupport.processes import ManagedProcess

SLUG = "e2e-restart"
WORKERS = ("e2e-restart-1", "e2e-restart-2")


@pytest.fixture(scope="module")
def restart_stack(peers: SharedPeers, e2e_root: Path) -> Iterator[tuple[Stack, EmbeddedPostgres]]:
    root = e2e_root / "restart"
    postgres = EmbeddedPostgres(root / "postgres", database="e2e_restart")
    try:
        with peers.deployment(
            root=root,
            dsn=postgres.start(),
            definitions=write_definitions(root / "definitions", RESTART_DEFINITIONS),
            task_queue="e2e-restart",
            replicas=1,
            name="restart",
        ) as stack:
            yield stack, postgres
    finally:
        postgres.close()


def _marked(workers: list[ManagedProcess], what: str) -> set[str]:
    """Run ids whose approach reached `what` ("started" or "done") on these workers."""
    return {run_id for run_id, _attempt in approaches(workers, ended=what == "done")}


# A worker's request that met the outage and succeeded on a retry leaves only the queue
# client's "queue request retried" line: under load, the heartbeats and the close can all
# be carried through the outage that way.
_OUTAGE_SIGNS = (
    "queue request retried",
    "heartbeat failed, will retry",
    "activity-core unreachable while replaying closes; not claiming",
    "close not delivered",
    "claim failed",
)


@pytest.mark.timeout(240)
def test_restarting_activity_core_and_postgresql_mid_run_loses_and_repeats_nothing(
    restart_stack: tuple[Stack, EmbeddedPostgres],
) -> None:
    stack, postgres = restart_stack
    repository = stack.repositories / "e2e" / "restart"
    baseline = git(repository, "rev-parse", "HEAD")
    # a 30 s lease: a heartbeat every 10 s, within each 12 s command, so the outage below
    # costs at most a missed one; activity-core has ~17 s after a command ends to be back
    # before the lease runs out (a loaded host has taken over 11 s to start it)
    configs = [stack.worker_config(worker_id, lease_seconds=30) for worker_id in WORKERS]
    workers = [stack.worker(config, [SLUG]) for config in configs]

    fire_run_ids = [stack.fire(SLUG) for _ in range(3)]
    running = stack.wait(
        lambda: len(started := _marked(workers, "started")) == 2 and started,
        timeout=30,
        what="both workers to be executing a run",
    )
    serve, temporal_worker = stack.serves[0][0], stack.temporal_worker
    assert temporal_worker is not None

    # mid-run (each command sleeps 12 s): PostgreSQL restarted under a running activity-core
    postgres.restart()
    # then activity-core down until a command has finished, so that its worker's
    # heartbeats and its close meet the outage, then back up
    temporal_worker.stop()
    serve.stop()
    stack.wait(
        lambda: _marked(workers, "done") & running,
        timeout=30,
        what="a command to finish while activity-core is down",
    )
    time.sleep(1.0)
    assert not _marked(workers, "started") - running  # nothing new was claimed meanwhile
    serve.start(wait=False)
    temporal_worker.start(wait=False)
    serve.wait_ready()
    temporal_worker.wait_ready()
    fire_run_ids.append(stack.fire(SLUG))  # and the whole path works afterwards

    rows = stack.wait(
        lambda: (
            (rs := stack.ops_runs(SLUG))
            and len(rs) == 4
            and all(r["state"] == "succeeded" for r in rs)
            and rs
        ),
        timeout=90,
        what="all four runs to succeed",
    )

    run_ids = {str(row["id"]) for row in rows}
    # none lost, none executed twice: one claim each, one execution each, one landing each
    assert {row["attempt"] for row in rows} == {1}
    assert {row["claim_owner"] for row in rows} <= set(WORKERS)
    assert sorted(approaches(workers)) == sorted((run_id, 1) for run_id in run_ids)
    branches = landing_branches(repository)
    assert set(branches) == {f"rein/{run_id}/1" for run_id in run_ids}
    for row in rows:
        head = json.loads(row["result"])["head_after"]
        assert commits_on(repository, f"rein/{row['id']}/1", baseline) == [head]
    # every close delivered from the outboxes, nothing pending or quarantined
    delivered = []
    for config in configs:
        box = outbox(config.state_dir)
        assert box.pending == [] and box.quarantined == [], config.worker_id
        delivered += [e for e in box.delivered if e["run_id"] in run_ids]
    assert sorted(e["run_id"] for e in delivered) == sorted(run_ids)
    assert {e["disposition"] for e in delivered} <= {"applied", "reconciled"}
    # the ops UI shows each fire's run done, in one attempt
    owners = {str(row["id"]): row["claim_owner"] for row in rows}
    for fire_run_id in fire_run_ids:
        page = stack.ui_run(SLUG, fire_run_id)
        (shown,) = [run_id for run_id in run_ids if f'id="ops-run-{run_id}"' in page]
        assert ui_facts(page, shown) == {
            "state": "succeeded",
            "attempt": "1",
            "claim_owner": owners[shown],
        }
    # the workers met the outage and rode it out themselves
    assert all(worker.alive and worker.starts == 1 for worker in workers)
    messages = {line["message"] for worker in workers for line in log_lines(worker)}
    assert messages & set(_OUTAGE_SIGNS), messages
