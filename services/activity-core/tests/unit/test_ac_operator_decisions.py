"""The pure decisions of requeue and cancel, branch by branch, and the successor's key."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from activity_core.operator.decisions import (
    cancel_error,
    decide_cancel,
    decide_requeue,
    successor_key,
)
from activity_core.queue.close_decision import Refuse
from ops_contracts import RefusalCode, RunState

RUN = uuid.UUID("00000000-0000-4000-8000-0000000000aa")


def row(state: str, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "state": state,
        "cancelled_by": None,
        "claim_owner": None,
        "attempt": 0,
    }
    values.update(overrides)
    return values


def test_requeue_takes_failed_and_expired_runs_only() -> None:
    assert decide_requeue(None) == Refuse(RefusalCode.not_found, "no ops run with this id")
    assert decide_requeue(row("failed")) is None
    assert decide_requeue(row("expired")) is None
    for state, said in [
        ("open", "it is open: it is waiting for a claim already"),
        ("claimed", "it is claimed: a worker holds it (cancel it first to stop it)"),
        ("succeeded", "it succeeded: only failed or expired runs are requeued"),
    ]:
        assert decide_requeue(row(state)) == Refuse(
            RefusalCode.state_conflict, f"the run cannot be requeued: {said}"
        )
    # every state is decided
    for state in RunState:
        decide_requeue(row(state.value))


def test_cancel_takes_open_and_claimed_runs_only() -> None:
    assert decide_cancel(None) == Refuse(RefusalCode.not_found, "no ops run with this id")
    assert decide_cancel(row("open")) is None
    assert decide_cancel(row("claimed", claim_owner="w", attempt=1)) is None
    for state in ("succeeded", "failed", "expired"):
        refusal = decide_cancel(row(state))
        assert refusal == Refuse(
            RefusalCode.state_conflict,
            f"the run is already {state}: only open or claimed runs are cancelled",
        )
    assert decide_cancel(row("failed", cancelled_by="alice")) == Refuse(
        RefusalCode.state_conflict, "the run was cancelled already, by operator alice"
    )


def test_the_cancel_error_says_who_from_whom_and_why_on_one_bounded_line() -> None:
    claimed = row("claimed", claim_owner="rein@host", attempt=2)
    assert cancel_error(claimed, "alice", "bad deploy") == (
        "cancelled by operator alice while rein@host held attempt 2: bad deploy"
    )
    assert cancel_error(row("open"), "bob", "x\ny") == (
        "cancelled by operator bob while it was open: x y"
    )
    assert len(cancel_error(row("open"), "bob", "z" * 5000)) == 2048


@pytest.mark.parametrize(
    ("key", "expected"),
    [(None, f"requeue/{RUN}"), ("ticket-42", f"requeue/{RUN}/ticket-42")],
)
def test_the_successor_key_is_the_original_and_the_request_key(
    key: str | None, expected: str
) -> None:
    assert successor_key(RUN, key) == expected
    # never an emitted key: those start with a definition slug, which holds no "/"
    assert successor_key(RUN, key).startswith("requeue/")


def test_a_close_or_heartbeat_of_a_cancelled_run_says_who_cancelled_it() -> None:
    from activity_core.queue.close_decision import CloseRequest, decide_close, decide_heartbeat
    from ops_contracts import CloseAction

    cancelled = {
        "state": "failed",
        "cancelled_by": "alice",
        "claim_owner": None,
        "close_intent_digest": None,
        "lease_active": None,
        "repository_grant": None,
        "attempt": 2,
    }
    request = CloseRequest(CloseAction.complete, "w", {"ok": True}, None, False, "ci1-x", 2)
    assert decide_close(cancelled, request, max_attempts=3) == Refuse(
        RefusalCode.terminal_conflict, "the run was cancelled by operator alice"
    )
    assert decide_heartbeat(cancelled, "w", 2) == Refuse(
        RefusalCode.state_conflict, "the run was cancelled by operator alice"
    )
