"""explain(facts): each reason from the facts that make it true, and only from those."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from activity_core.operator.explain import (
    AutomationFacts,
    ExplainFacts,
    HeldRun,
    RunFacts,
    WorkerFacts,
    explain,
)
from activity_core.operator.workers import (
    ALIVE_SECONDS,
    GONE_SECONDS,
    filter_matches,
    worker_state,
)
from ops_contracts import RunState, WorkerState

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
RUN = uuid.UUID("00000000-0000-4000-8000-0000000000aa")


def run(**overrides: Any) -> RunFacts:
    values: dict[str, Any] = {
        "id": RUN,
        "state": RunState.open,
        "labels": ("automated", "brief"),
        "priority": "medium",
        "attempt": 0,
        "claim_owner": None,
        "lease_until": None,
        "last_error": None,
        "cancelled_by": None,
        "requeued_from": None,
        "requeued_as": (),
        "created_at": NOW - timedelta(minutes=30),
        "updated_at": NOW - timedelta(minutes=30),
    }
    values.update(overrides)
    return RunFacts(**values)


def worker(worker_id: str, *, ago: float | None = 5, **overrides: Any) -> WorkerFacts:
    values: dict[str, Any] = {
        "worker_id": worker_id,
        "last_claim_at": NOW - timedelta(seconds=ago) if ago is not None else None,
        "labels": ("automated",),
        "labels_mode": "any",
        "limit": 1,
        "holding": (),
    }
    values.update(overrides)
    return WorkerFacts(**values)


def facts(**overrides: Any) -> ExplainFacts:
    values: dict[str, Any] = {
        "run": run(),
        "now": NOW,
        "max_attempts": 3,
        "open_ahead": 0,
        "workers": (worker("w-1"),),
        "automation": AutomationFacts("fi-daily-brief", paused=False, removed=False),
    }
    values.update(overrides)
    return ExplainFacts(**values)


def codes(f: ExplainFacts) -> list[str]:
    return [reason.code for reason in explain(f)]


def detail(f: ExplainFacts, code: str) -> str:
    found = [reason.detail for reason in explain(f) if reason.code == code]
    assert found, (code, codes(f))
    return found[0]


def held(live: bool = True) -> HeldRun:
    return HeldRun(uuid.uuid4(), NOW + timedelta(minutes=5 if live else -5), live)


# -- open runs --------------------------------------------------------------------------------


def test_an_open_run_with_a_claiming_matching_worker_is_next_in_line() -> None:
    assert codes(facts()) == ["matching_workers", "next_in_line"]
    assert "w-1 (any of [automated])" in detail(facts(), "matching_workers")


def test_no_worker_at_all_is_no_matching_worker() -> None:
    f = facts(workers=())
    assert codes(f)[0] == "no_matching_worker"
    assert "no worker has claimed in that time" in detail(f, "no_matching_worker")


def test_claiming_workers_whose_filter_does_not_match_are_named() -> None:
    f = facts(
        workers=(
            worker("w-other", labels=("reports",)),
            worker("w-all", labels=("automated", "missing"), labels_mode="all"),
        )
    )
    text = detail(f, "no_matching_worker")
    assert "its labels (automated, brief)" in text
    assert "w-other (any of [reports])" in text
    assert "w-all (all of [automated, missing])" in text


def test_a_matching_worker_that_stopped_claiming_is_named_with_how_long_ago() -> None:
    f = facts(workers=(worker("w-quiet", ago=600),))
    assert codes(f)[0] == "no_matching_worker"
    assert "w-quiet (last claim 10 min ago)" in detail(f, "no_matching_worker")


def test_every_matching_worker_busy_is_matching_workers_busy() -> None:
    busy = worker("w-busy", ago=3000, holding=(held(),), limit=1)
    f = facts(workers=(busy,))
    assert codes(f)[0] == "matching_workers_busy"
    assert "w-busy (holds 1 of 1)" in detail(f, "matching_workers_busy")
    # one with room left is enough for a claim
    f = facts(workers=(busy, worker("w-free")))
    assert codes(f)[0] == "matching_workers"
    # a worker of limit 2 holding one has room
    f = facts(workers=(replace(busy, limit=2),))
    assert codes(f)[0] == "matching_workers"


def test_a_worker_claiming_any_run_matches_every_run() -> None:
    f = facts(run=run(labels=()), workers=(worker("w-any", labels=None),))
    assert codes(f)[0] == "matching_workers"
    assert "w-any (any run)" in detail(f, "matching_workers")


def test_runs_ahead_are_counted() -> None:
    f = facts(open_ahead=7, run=run(priority="low"))
    text = detail(f, "queued_behind")
    assert text.startswith("7 open run(s) are ahead of it in claim order")
    assert "it is low, open for 30 min" in text
    assert "next_in_line" not in codes(f)


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (0, None),
        (1, None),
        (2, "last_attempt"),
        (3, "attempt_ceiling_reached"),
        (5, "attempt_ceiling_reached"),
    ],
)
def test_the_attempt_ceiling_is_said_before_it_ends_the_run(
    attempt: int, expected: str | None
) -> None:
    found = set(codes(facts(run=run(attempt=attempt))))
    ceiling = {"last_attempt", "attempt_ceiling_reached"} & found
    assert ceiling == ({expected} if expected else set())
    if expected == "last_attempt":
        assert "attempt 3 of 3, the last" in detail(facts(run=run(attempt=2)), "last_attempt")


def test_a_reopened_run_says_it_ran_before_with_its_last_error() -> None:
    f = facts(run=run(attempt=1, last_error="llm timeout"))
    assert (
        detail(f, "retried")
        == "it ran 1 time(s) before and was reopened; the last error: llm timeout"
    )
    assert "retried" not in codes(facts())


def test_a_paused_or_removed_automation_is_said_for_live_runs_only() -> None:
    paused = AutomationFacts("fi-daily-brief", paused=True, removed=False)
    assert codes(facts(automation=paused))[-1] == "automation_paused"
    removed = AutomationFacts("fi-daily-brief", paused=True, removed=True)
    assert codes(facts(automation=removed))[-1] == "automation_removed"
    done = facts(automation=paused, run=run(state=RunState.succeeded, attempt=1))
    assert "automation_paused" not in codes(done)


# -- claimed runs -----------------------------------------------------------------------------


def test_a_claimed_run_says_who_holds_it_until_when() -> None:
    f = facts(
        run=run(
            state=RunState.claimed,
            claim_owner="w-1",
            attempt=1,
            lease_until=NOW + timedelta(minutes=10),
        ),
        open_ahead=None,
    )
    assert codes(f) == ["claimed"]
    assert detail(f, "claimed") == (
        "w-1 holds it (attempt 1) until 2026-03-01T12:10:00+00:00, 10 min from now; its "
        "heartbeats extend that"
    )


def test_an_ended_lease_says_what_reopens_or_expires_it() -> None:
    stale = run(
        state=RunState.claimed,
        claim_owner="w-1",
        attempt=1,
        lease_until=NOW - timedelta(seconds=30),
    )
    f = facts(run=stale, open_ahead=None)
    assert codes(f) == ["lease_ended"]
    assert "ended at 2026-03-01T11:59:30+00:00, 30 s ago" in detail(f, "lease_ended")
    assert detail(f, "lease_ended").endswith("expire-leases reopens it")
    last = facts(run=replace(stale, attempt=3), open_ahead=None)
    assert codes(last) == ["lease_ended", "last_attempt"]
    assert "expires it (the attempt ceiling is reached)" in detail(last, "lease_ended")


# -- terminal runs ----------------------------------------------------------------------------


def test_terminal_runs_say_how_they_ended_and_whether_requeue_is_left() -> None:
    ended = NOW - timedelta(hours=1)
    succeeded = facts(run=run(state=RunState.succeeded, attempt=1, updated_at=ended))
    assert codes(succeeded) == ["succeeded"]
    failed = facts(run=run(state=RunState.failed, attempt=3, last_error="boom", updated_at=ended))
    assert codes(failed) == ["failed", "requeue_possible"]
    assert detail(failed, "failed").endswith("it will not run again: boom")
    assert f"POST /ops-runs/{RUN}/requeue" in detail(failed, "requeue_possible")
    expired = facts(run=run(state=RunState.expired, attempt=3, updated_at=ended))
    assert codes(expired) == ["expired", "requeue_possible"]
    cancelled = facts(
        run=run(
            state=RunState.failed,
            cancelled_by="alice",
            last_error="cancelled by operator alice while it was open: no",
        )
    )
    assert codes(cancelled) == ["cancelled", "requeue_possible"]
    assert detail(cancelled, "cancelled").startswith("operator alice cancelled it at")


def test_requeues_are_named_both_ways() -> None:
    successor = uuid.uuid4()
    original = facts(run=run(state=RunState.failed, attempt=1, requeued_as=(successor,)))
    assert codes(original) == ["failed", "requeued_as"]
    assert detail(original, "requeued_as") == f"requeued as {successor}"
    again = facts(run=run(requeued_from=RUN))
    assert codes(again)[-1] == "requeued_from"


# -- the pieces -------------------------------------------------------------------------------


def test_worker_states_at_their_thresholds() -> None:
    def state(ago: float | None, live: bool = False) -> WorkerState:
        at = NOW - timedelta(seconds=ago) if ago is not None else None
        return worker_state(at, holds_live_lease=live, now=NOW)

    assert state(ALIVE_SECONDS) is WorkerState.alive
    assert state(ALIVE_SECONDS + 1) is WorkerState.idle
    assert state(GONE_SECONDS) is WorkerState.idle
    assert state(GONE_SECONDS + 1) is WorkerState.gone
    assert state(None) is WorkerState.gone
    assert state(None, live=True) is WorkerState.alive
    assert state(10 * GONE_SECONDS, live=True) is WorkerState.alive


LABELS = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4, unique=True)


@given(claim=LABELS, mode=st.sampled_from(["any", "all"]), labels=LABELS)
def test_filter_matches_is_the_claims_label_test(
    claim: list[str], mode: str, labels: list[str]
) -> None:
    # the claim's SQL: no labels -> any run; any -> labels ?| claim; all -> labels @> claim
    if not claim:
        expected = True
    elif mode == "any":
        expected = any(label in labels for label in claim)
    else:
        expected = all(label in labels for label in claim)
    assert filter_matches(claim or None, mode, labels) is expected
