"""The pure decisions of queue/vacuum.py: start-up notes, 'held' and the wait."""

from __future__ import annotations

import pytest

from activity_core.queue.vacuum import (
    CheckOutcome,
    VacuumFacts,
    next_wait,
    start_notes,
    vacuum_held,
)

HEALTHY = VacuumFacts(
    server_autovacuum=True, track_counts=True, table_autovacuum=True, may_vacuum=True
)


def facts(**changes: bool) -> VacuumFacts:
    return VacuumFacts(**{**HEALTHY.__dict__, **changes})


def test_a_healthy_server_needs_no_note() -> None:
    assert start_notes(HEALTHY, 10_000) == []


def test_autovacuum_off_on_the_server_says_activity_core_takes_over_at_the_limit() -> None:
    (note,) = start_notes(facts(server_autovacuum=False), 10_000)
    assert "autovacuum is off on the server" in note
    assert "vacuums ops_runs itself at 10000 dead rows" in note


def test_autovacuum_off_for_the_table_is_named_as_such() -> None:
    (note,) = start_notes(facts(table_autovacuum=False), 500)
    assert "autovacuum is off for ops_runs" in note


def test_autovacuum_off_and_our_vacuum_off_warns_that_claims_will_slow() -> None:
    (note,) = start_notes(facts(server_autovacuum=False), 0)
    assert "does not vacuum ops_runs" in note
    assert "claims will slow down" in note


def test_a_role_that_may_not_vacuum_is_told_and_autovacuum_off_then_warns_too() -> None:
    notes = start_notes(facts(may_vacuum=False, server_autovacuum=False), 10_000)
    assert any("may not VACUUM ops_runs" in n for n in notes)
    assert any("does not vacuum ops_runs" in n for n in notes)


def test_track_counts_off_blinds_both_vacuums() -> None:
    notes = start_notes(facts(track_counts=False), 10_000)
    assert any("track_counts is off" in n for n in notes)
    # with autovacuum on, that is the only note; no claim that we take over
    assert len(notes) == 1


@pytest.mark.parametrize(
    ("before", "after", "held"),
    [
        (10_000, 0, False),
        (10_000, 6_000, False),  # a slow VACUUM of a busy table: rows died while it ran
        (10_000, 8_999, False),
        (10_000, 9_000, True),
        (10_000, 12_000, True),  # nothing removed, and more died meanwhile
    ],
)
def test_a_vacuum_that_left_nearly_all_it_found_was_held(
    before: int, after: int, held: bool
) -> None:
    assert vacuum_held(before, after) is held


def test_the_wait_doubles_after_each_held_vacuum_up_to_the_ceiling() -> None:
    waits = [5.0]
    for _ in range(8):
        waits.append(next_wait(CheckOutcome.HELD, waits[-1], 5.0, 300.0))
    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]


@pytest.mark.parametrize(
    "outcome",
    [
        CheckOutcome.VACUUMED,
        CheckOutcome.BELOW_LIMIT,
        CheckOutcome.BUSY,
        CheckOutcome.NOT_READY,
    ],
)
def test_any_other_outcome_returns_to_the_check_period(outcome: CheckOutcome) -> None:
    assert next_wait(outcome, 300.0, 5.0, 300.0) == 5.0


def test_a_ceiling_below_the_check_period_never_shortens_the_period() -> None:
    assert next_wait(CheckOutcome.HELD, 5.0, 5.0, 1.0) == 5.0
