"""The one-statement close (queries.CLOSE_LEASED_UNGRANTED) decides what decide_close would.

That statement changes a row only when it is claimed by the closer, its lease is active,
it was queued without a grant and it is at the attempt the close names (if it names one);
for those rows, whatever the request, decide_close must answer ApplyTerminal with the state
terminal_state_without_row named. Where that function answers None the service always
takes the locking path.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from activity_core.queue.close_decision import (
    ApplyTerminal,
    CloseRequest,
    Refuse,
    ReopenRun,
    decide_close,
    terminal_state_without_row,
)
from ops_contracts import CloseAction, RefusalCode, RunState

ME = "worker@a"
MAX_ATTEMPTS = 3

_grant_claims = st.fixed_dictionaries(
    {},
    optional={
        "grant_id": st.one_of(st.none(), st.just("rg1-abc")),
        "acceptance_policy_id": st.one_of(st.none(), st.just("ap1-abc")),
        "commit_count": st.integers(0, 3),
    },
)
_results = st.one_of(
    st.none(),
    st.just({"ok": True}),
    st.builds(lambda t: {"ok": True, "repository_transaction": t}, _grant_claims),
)


@st.composite
def close_requests(draw: st.DrawFn, attempts: st.SearchStrategy[int | None]) -> CloseRequest:
    action = draw(st.sampled_from(list(CloseAction)))
    return CloseRequest(
        action=action,
        worker_id=ME,
        result=draw(_results) if action is CloseAction.fail else draw(_results) or {"ok": True},
        error=None if action is CloseAction.complete else "boom",
        reopen=draw(st.booleans()) if action is CloseAction.fail else False,
        intent_digest="ci1-x",
        attempt=draw(attempts),
    )


def _fast_path_row(attempt: int) -> dict[str, Any]:
    """A row CLOSE_LEASED_UNGRANTED's WHERE clause matches for worker ME."""
    return {
        "state": "claimed",
        "claim_owner": ME,
        "lease_active": True,
        "close_intent_digest": None,
        "repository_grant": None,
        "attempt": attempt,
    }


@given(st.data(), st.integers(1, MAX_ATTEMPTS + 2))
def test_the_one_statement_close_agrees_with_decide_close(
    data: st.DataObject, attempt: int
) -> None:
    # the statement's attempt condition holds: the close names no attempt, or this one
    request = data.draw(close_requests(st.sampled_from([None, attempt])))
    state = terminal_state_without_row(request)
    decision = decide_close(_fast_path_row(attempt), request, max_attempts=MAX_ATTEMPTS)
    if state is not None:
        assert decision == ApplyTerminal(state)
    else:
        # None only where the row matters or the close can never apply on such a row.
        assert request.reopen or not isinstance(decision, ApplyTerminal)


@given(st.data(), st.integers(1, MAX_ATTEMPTS + 2))
def test_a_close_the_statement_leaves_for_a_stale_attempt_is_expired_lease(
    data: st.DataObject, attempt: int
) -> None:
    """Where only the attempt condition fails (the close names another attempt), the
    statement changes nothing and decide_close, on the locking path, refuses it as
    expired_lease: no path applies a stale close."""
    stale = st.integers(1, MAX_ATTEMPTS + 2).filter(lambda n: n != attempt)
    request = data.draw(close_requests(stale))
    decision = decide_close(_fast_path_row(attempt), request, max_attempts=MAX_ATTEMPTS)
    assert isinstance(decision, Refuse) and decision.code is RefusalCode.expired_lease


def test_reopening_failures_and_grant_claims_take_the_locking_path() -> None:
    reopen = CloseRequest(CloseAction.fail, ME, None, "boom", True, "ci1-x")
    assert terminal_state_without_row(reopen) is None
    assert isinstance(decide_close(_fast_path_row(1), reopen, max_attempts=3), ReopenRun)
    claims_grant = CloseRequest(
        CloseAction.complete,
        ME,
        {"ok": True, "repository_transaction": {"grant_id": "rg1-abc"}},
        None,
        False,
        "ci1-x",
    )
    assert terminal_state_without_row(claims_grant) is None
    assert (
        terminal_state_without_row(CloseRequest(CloseAction.fail, ME, None, "boom", False, "ci1-x"))
        is RunState.failed
    )


def _conditions(statement: str) -> set[str]:
    """The conditions a row must meet to be changed (CLOSE_MANY: locked by its CTE)."""
    clause = statement.split("WHERE", 1)[1].split("FOR NO KEY UPDATE", 1)[0]
    clause = clause.split("RETURNING", 1)[0]
    conditions = {c.strip() for c in clause.split("AND")}
    join = statement.split(" ON ", 1)[1].split("WHERE", 1)[0] if " ON " in statement else None
    return conditions | ({join.strip()} if join else set())


def test_the_shared_close_statement_has_the_one_statement_close_conditions() -> None:
    """CLOSE_MANY_LEASED_UNGRANTED (closes that arrived together) locks and changes a row
    under exactly CLOSE_LEASED_UNGRANTED's conditions, with each closer's id, worker and
    attempt, and skips a row another transaction holds."""
    from activity_core.queue import queries

    alone = _conditions(queries.CLOSE_LEASED_UNGRANTED)
    together = {
        c.replace("r.", "")
        .replace("c.id", "$1")
        .replace("c.worker_id", "$2")
        .replace("c.attempt", "$7")
        for c in _conditions(queries.CLOSE_MANY_LEASED_UNGRANTED)
    }
    assert together == alone
    assert alone == {
        "id = $1",
        "state = 'claimed'",
        "claim_owner = $2",
        "lease_until > now()",
        "repository_grant IS NULL",
        "($7::int IS NULL OR attempt = $7::int)",
    }
    assert "SKIP LOCKED" in queries.CLOSE_MANY_LEASED_UNGRANTED
