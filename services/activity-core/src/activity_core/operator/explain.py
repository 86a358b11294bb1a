"""Why a run is where it is: a pure function of facts read in one snapshot.

`explain(facts)` answers reasons, most telling first; each has a stable code:

open runs
  no_matching_worker     no worker whose label filter matches the run claimed within
                         ALIVE_SECONDS (the detail names the workers that did, and
                         matching ones that stopped claiming a while ago)
  matching_workers_busy  every matching worker that is alive holds as many live runs as it
                         claims at once: the run waits for one of them to finish
  matching_workers       matching workers are claiming (named)
  next_in_line           no open run is ahead of it in claim order
  queued_behind          N open runs are ahead of it (priority, then age)
  last_attempt           its next claim is the last attempt OPS_RUN_MAX_ATTEMPTS allows
  attempt_ceiling_reached  it has had as many attempts as the ceiling already (the ceiling
                         was lowered): a failure or lost lease of its next one ends it
  retried                it ran before and was reopened (with the last error, if any)
claimed runs
  claimed                who holds it, which attempt, until when
  lease_ended            the holder's lease ended: the next claim or expire-leases reopens
                         it (or expires it at the ceiling)
  last_attempt           this attempt is the last one
terminal runs
  succeeded | failed | expired | cancelled   how and when it ended; it never runs again
  requeue_possible       a failed or expired run that was not requeued yet
any run
  requeued_as            the runs requeued from it
  requeued_from          the run it is a requeue of
  automation_paused / automation_removed   its automation emits no new fires (a live run
                         stays claimable)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from activity_core.operator.workers import ALIVE_SECONDS, filter_matches, worker_state
from ops_contracts import RunState, WorkerState

__all__ = [
    "AutomationFacts",
    "ExplainFacts",
    "HeldRun",
    "Reason",
    "RunFacts",
    "WorkerFacts",
    "explain",
]

MAX_NAMED_WORKERS = 5


@dataclass(frozen=True)
class Reason:
    code: str
    detail: str


@dataclass(frozen=True)
class HeldRun:
    run_id: uuid.UUID
    lease_until: datetime
    lease_live: bool


@dataclass(frozen=True)
class WorkerFacts:
    worker_id: str
    last_claim_at: datetime | None
    labels: tuple[str, ...] | None
    labels_mode: str | None
    limit: int | None
    holding: tuple[HeldRun, ...] = ()

    @property
    def live_held(self) -> int:
        return sum(1 for held in self.holding if held.lease_live)


@dataclass(frozen=True)
class RunFacts:
    id: uuid.UUID
    state: RunState
    labels: tuple[str, ...]
    priority: str
    attempt: int
    claim_owner: str | None
    lease_until: datetime | None
    last_error: str | None
    cancelled_by: str | None
    requeued_from: uuid.UUID | None
    requeued_as: tuple[uuid.UUID, ...]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class AutomationFacts:
    slug: str
    paused: bool
    removed: bool


@dataclass(frozen=True)
class ExplainFacts:
    run: RunFacts
    now: datetime
    max_attempts: int
    # open runs before this one in claim order (None unless the run is open)
    open_ahead: int | None
    workers: tuple[WorkerFacts, ...]
    automation: AutomationFacts | None


def explain(facts: ExplainFacts) -> list[Reason]:
    run = facts.run
    if run.state is RunState.open:
        reasons = _open(facts)
    elif run.state is RunState.claimed:
        reasons = _claimed(facts)
    else:
        reasons = _terminal(facts)
    if run.requeued_as:
        reasons.append(
            Reason("requeued_as", f"requeued as {', '.join(str(i) for i in run.requeued_as)}")
        )
    if run.requeued_from is not None:
        reasons.append(Reason("requeued_from", f"it is a requeue of run {run.requeued_from}"))
    if facts.automation is not None and run.state in (RunState.open, RunState.claimed):
        automation = facts.automation
        if automation.removed:
            reasons.append(
                Reason(
                    "automation_removed",
                    f"its automation {automation.slug} was removed from the definitions: no "
                    "new fires; this run stays claimable",
                )
            )
        elif automation.paused:
            reasons.append(
                Reason(
                    "automation_paused",
                    f"its automation {automation.slug} is paused: no new fires; this run "
                    "stays claimable",
                )
            )
    return reasons


def _open(facts: ExplainFacts) -> list[Reason]:
    run = facts.run
    reasons = _worker_reasons(facts)
    if facts.open_ahead is not None:
        if facts.open_ahead == 0:
            reasons.append(
                Reason(
                    "next_in_line",
                    "no open run is ahead of it in claim order: the next claim whose label "
                    "filter matches takes it",
                )
            )
        else:
            reasons.append(
                Reason(
                    "queued_behind",
                    f"{facts.open_ahead} open run(s) are ahead of it in claim order "
                    f"(priority, then age; it is {run.priority}, open for "
                    f"{_duration(facts.now, run.created_at)}); a claim whose filter matches "
                    "them takes them first",
                )
            )
    next_attempt = run.attempt + 1
    if run.attempt >= facts.max_attempts:
        reasons.append(
            Reason(
                "attempt_ceiling_reached",
                f"it has had {run.attempt} attempt(s) and the ceiling (OPS_RUN_MAX_ATTEMPTS) "
                f"is {facts.max_attempts}: a failure or a lost lease of its next attempt ends "
                "the run",
            )
        )
    elif next_attempt == facts.max_attempts:
        reasons.append(
            Reason(
                "last_attempt",
                f"its next claim is attempt {next_attempt} of {facts.max_attempts}, the last: "
                "a failure or a lost lease then ends the run",
            )
        )
    if run.attempt > 0:
        error = f"; the last error: {run.last_error}" if run.last_error else ""
        reasons.append(
            Reason("retried", f"it ran {run.attempt} time(s) before and was reopened{error}")
        )
    return reasons


def _worker_reasons(facts: ExplainFacts) -> list[Reason]:
    run = facts.run
    states = {
        w.worker_id: worker_state(w.last_claim_at, holds_live_lease=w.live_held > 0, now=facts.now)
        for w in facts.workers
    }
    alive = [w for w in facts.workers if states[w.worker_id] is WorkerState.alive]
    matching = [w for w in alive if filter_matches(w.labels, w.labels_mode, run.labels)]
    labels = ", ".join(run.labels) or "none"
    if not matching:
        if alive:
            seen = "; workers claiming: " + _names(alive, _filter_text)
        else:
            seen = "; no worker has claimed in that time or holds a live lease"
        stopped = [
            w
            for w in facts.workers
            if states[w.worker_id] is not WorkerState.alive
            and w.last_claim_at is not None
            and filter_matches(w.labels, w.labels_mode, run.labels)
        ]
        if stopped:
            seen += "; matching workers that stopped claiming: " + _names(
                stopped,
                lambda w: f"last claim {_duration(facts.now, w.last_claim_at)} ago",
            )
        return [
            Reason(
                "no_matching_worker",
                f"no worker whose label filter matches its labels ({labels}) has claimed in "
                f"the last {ALIVE_SECONDS} s{seen}",
            )
        ]
    busy = [w for w in matching if w.live_held >= (w.limit or 1)]
    if len(busy) == len(matching):
        return [
            Reason(
                "matching_workers_busy",
                "every worker whose label filter matches is busy: "
                + _names(busy, lambda w: f"holds {w.live_held} of {w.limit or 1}")
                + "; it waits for one of them to finish",
            )
        ]
    return [
        Reason(
            "matching_workers",
            f"{len(matching)} worker(s) whose label filter matches are claiming: "
            + _names(matching, _filter_text),
        )
    ]


def _claimed(facts: ExplainFacts) -> list[Reason]:
    run = facts.run
    reasons = []
    assert run.lease_until is not None
    if run.lease_until > facts.now:
        reasons.append(
            Reason(
                "claimed",
                f"{run.claim_owner} holds it (attempt {run.attempt}) until "
                f"{_at(run.lease_until)}, {_duration(run.lease_until, facts.now)} from now; "
                "its heartbeats extend that",
            )
        )
    else:
        ending = (
            "expires it (the attempt ceiling is reached)"
            if run.attempt >= facts.max_attempts
            else "reopens it"
        )
        reasons.append(
            Reason(
                "lease_ended",
                f"{run.claim_owner}'s lease (attempt {run.attempt}) ended at "
                f"{_at(run.lease_until)}, {_duration(facts.now, run.lease_until)} ago: the "
                f"next claim or POST /ops-runs/expire-leases {ending}",
            )
        )
    if run.attempt >= facts.max_attempts:
        reasons.append(
            Reason(
                "last_attempt",
                f"attempt {run.attempt} of {facts.max_attempts} is the last: a failure or a "
                "lost lease ends the run",
            )
        )
    return reasons


def _terminal(facts: ExplainFacts) -> list[Reason]:
    run = facts.run
    when = _at(run.updated_at)
    if run.state is RunState.succeeded:
        return [
            Reason(
                "succeeded",
                f"it succeeded at {when} (attempt {run.attempt}); it will not run again",
            )
        ]
    if run.cancelled_by is not None:
        reasons = [
            Reason(
                "cancelled",
                f"operator {run.cancelled_by} cancelled it at {when}; it will not run again "
                f"({run.last_error})",
            )
        ]
    elif run.state is RunState.failed:
        reasons = [
            Reason(
                "failed",
                f"it failed at {when} (attempt {run.attempt} of {facts.max_attempts}); it will "
                f"not run again: {run.last_error or 'no error was recorded'}",
            )
        ]
    else:
        reasons = [
            Reason(
                "expired",
                f"its lease ended at attempt {run.attempt} (the ceiling is "
                f"{facts.max_attempts}) and it expired at {when}; it will not run again",
            )
        ]
    if not run.requeued_as:
        reasons.append(
            Reason(
                "requeue_possible",
                f"to run it again, requeue it: POST /ops-runs/{run.id}/requeue "
                f"(activity-core runs requeue {run.id})",
            )
        )
    return reasons


def _filter_text(worker: WorkerFacts) -> str:
    if not worker.labels:
        return "any run"
    mode = worker.labels_mode or "any"
    return f"{mode} of [{', '.join(worker.labels)}]"


def _names(workers: Sequence[WorkerFacts], describe: Callable[[WorkerFacts], str]) -> str:
    shown = [f"{w.worker_id} ({describe(w)})" for w in workers[:MAX_NAMED_WORKERS]]
    more = len(workers) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _at(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _duration(later: datetime, earlier: datetime | None) -> str:
    if earlier is None:
        return "an unknown time"
    seconds = max(0, int((later - earlier).total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172_800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86_400} d"
