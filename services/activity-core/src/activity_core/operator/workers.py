"""What the queue can tell about a worker identity (pure).

The queue sees a worker in two ways: its claims (each identity's last one, recorded by
queue/sightings.py) and the runs it holds (claimed rows with its id). A worker polls with
claims while it has capacity (a long poll lasts at most 20 s), and heartbeats, not
claims, while it executes. So:

- `alive`: it claimed within ALIVE_SECONDS (3 x the longest long poll), or it holds a run
  whose lease has not ended (it heartbeats, or its lease has yet to run out);
- `idle`: not alive, but it claimed within GONE_SECONDS (the default lease): it stopped
  claiming a short while ago (stopped, backing off, or cannot create its sandbox);
- `gone`: not alive and its last claim is older than that (or none was recorded).

`filter_matches` is the claim's own label test (queue/queries.py, `_CLAIMABLE`), so
explain says what a claim would do.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from ops_contracts import LabelsMode, WorkerState

__all__ = ["ALIVE_SECONDS", "GONE_SECONDS", "filter_matches", "worker_state"]

ALIVE_SECONDS = 60
GONE_SECONDS = 900


def worker_state(
    last_claim_at: datetime | None, *, holds_live_lease: bool, now: datetime
) -> WorkerState:
    if holds_live_lease:
        return WorkerState.alive
    if last_claim_at is None:
        return WorkerState.gone
    age = now - last_claim_at
    if age <= timedelta(seconds=ALIVE_SECONDS):
        return WorkerState.alive
    if age <= timedelta(seconds=GONE_SECONDS):
        return WorkerState.idle
    return WorkerState.gone


def filter_matches(
    labels: Sequence[str] | None, labels_mode: LabelsMode | str | None, run_labels: Sequence[str]
) -> bool:
    """Whether a claim with this label filter may take a run with these labels: no labels
    takes any run; `any` needs one of them on the run, `all` every one of them."""
    if not labels:
        return True
    if LabelsMode(labels_mode or LabelsMode.any) is LabelsMode.all:
        return set(labels) <= set(run_labels)
    return not set(labels).isdisjoint(run_labels)
