"""The pure close decision: refusal order of the interface decisions, branch by branch."""

from __future__ import annotations

from typing import Any

import pytest

from activity_core.queue.close_decision import (
    ApplyTerminal,
    CloseRequest,
    Reconcile,
    Refuse,
    ReopenRun,
    decide_close,
    decide_heartbeat,
)
from ops_contracts import CloseAction, RefusalCode, RunState

ME = "worker@a"


def row(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "state": "claimed",
        "claim_owner": ME,
        "lease_active": True,
        "close_intent_digest": None,
        "cancelled_by": None,
        "repository_grant": None,
        "attempt": 1,
    }
    base.update(overrides)
    return base


def request(action: CloseAction = CloseAction.complete, **overrides: Any) -> CloseRequest:
    values: dict[str, Any] = {
        "action": action,
        "worker_id": ME,
        "result": {"ok": True},
        "error": None if action is CloseAction.complete else "boom",
        "reopen": False,
        "intent_digest": "ci1-same",
    }
    values.update(overrides)
    return CloseRequest(**values)


@pytest.mark.parametrize(
    ("stored", "req", "expected"),
    [
        (None, request(), Refuse(RefusalCode.not_found, "")),
        (row(state="succeeded", close_intent_digest="ci1-same"), request(), Reconcile()),
        (
            row(state="succeeded", close_intent_digest="ci1-same"),
            request(worker_id="worker@b"),
            Refuse(RefusalCode.terminal_conflict, ""),
        ),
        (
            row(state="failed", close_intent_digest="ci1-other"),
            request(),
            Refuse(RefusalCode.terminal_conflict, ""),
        ),
        (row(state="expired"), request(), Refuse(RefusalCode.terminal_conflict, "")),
        (row(state="succeeded"), request(), Refuse(RefusalCode.terminal_conflict, "")),
        (
            row(state="open", claim_owner=None, lease_active=None),
            request(),
            Refuse(RefusalCode.state_conflict, ""),
        ),
        (row(claim_owner="worker@b"), request(), Refuse(RefusalCode.wrong_owner, "")),
        (
            row(claim_owner="worker@b", lease_active=False),
            request(),
            Refuse(RefusalCode.wrong_owner, ""),
        ),
        (row(lease_active=False), request(), Refuse(RefusalCode.expired_lease, "")),
        (row(), request(), ApplyTerminal(RunState.succeeded)),
        (row(), request(CloseAction.fail), ApplyTerminal(RunState.failed)),
        (row(attempt=2), request(CloseAction.fail, reopen=True), ReopenRun()),
        (row(attempt=3), request(CloseAction.fail, reopen=True), ApplyTerminal(RunState.failed)),
        (
            row(repository_grant={"version": "1"}),
            request(),
            Refuse(RefusalCode.evidence_conflict, ""),
        ),
    ],
)
def test_decide_close(stored: dict[str, Any] | None, req: CloseRequest, expected: Any) -> None:
    decision = decide_close(stored, req, max_attempts=3)
    if isinstance(expected, Refuse):
        assert isinstance(decision, Refuse)
        assert decision.code is expected.code
        assert decision.detail
    else:
        assert decision == expected


# Fencing: a close naming an attempt that is not the run's current one is expired_lease,
# exactly where an ended lease is refused: after the terminal, open and owner checks, before
# the grant evidence.
@pytest.mark.parametrize(
    ("stored", "req", "expected"),
    [
        (row(attempt=2), request(attempt=1), Refuse(RefusalCode.expired_lease, "")),
        (row(attempt=2), request(attempt=3), Refuse(RefusalCode.expired_lease, "")),
        (row(attempt=2), request(attempt=2), ApplyTerminal(RunState.succeeded)),
        (row(attempt=2), request(attempt=None), ApplyTerminal(RunState.succeeded)),
        (
            row(attempt=2),
            request(CloseAction.fail, reopen=True, attempt=1),
            Refuse(RefusalCode.expired_lease, ""),
        ),
        (row(attempt=2), request(CloseAction.fail, reopen=True, attempt=2), ReopenRun()),
        (
            row(attempt=2, repository_grant={"version": "1"}),
            request(attempt=1),
            Refuse(RefusalCode.expired_lease, ""),
        ),
        (
            row(attempt=2, claim_owner="worker@b"),
            request(attempt=1),
            Refuse(RefusalCode.wrong_owner, ""),
        ),
        (
            row(state="open", claim_owner=None, lease_active=None, attempt=2),
            request(attempt=1),
            Refuse(RefusalCode.state_conflict, ""),
        ),
        # a terminal row is judged by its recorded close alone: the owner's exact repeat
        # reconciles whatever attempt it names; anything else conflicts
        (
            row(state="succeeded", close_intent_digest="ci1-same", attempt=2, lease_active=None),
            request(attempt=1),
            Reconcile(),
        ),
        (
            row(state="succeeded", close_intent_digest="ci1-other", attempt=2, lease_active=None),
            request(attempt=1),
            Refuse(RefusalCode.terminal_conflict, ""),
        ),
    ],
)
def test_decide_close_fences_by_attempt(
    stored: dict[str, Any], req: CloseRequest, expected: Any
) -> None:
    test_decide_close(stored, req, expected)


def test_a_stale_attempt_says_which_attempt_is_current() -> None:
    decision = decide_close(row(attempt=2), request(attempt=1), max_attempts=3)
    assert isinstance(decision, Refuse)
    assert "attempt 1" in decision.detail and "(2)" in decision.detail


def test_heartbeat_fences_by_attempt_where_expired_lease_stands() -> None:
    refusal = decide_heartbeat(row(attempt=2), ME, 1)
    assert refusal is not None and refusal.code is RefusalCode.expired_lease
    refusal = decide_heartbeat(row(attempt=2, claim_owner="worker@b"), ME, 1)
    assert refusal is not None and refusal.code is RefusalCode.wrong_owner
    refusal = decide_heartbeat(row(state="open", claim_owner=None, attempt=2), ME, 1)
    assert refusal is not None and refusal.code is RefusalCode.state_conflict
    assert decide_heartbeat(row(attempt=2), ME, 2) is None
    assert decide_heartbeat(row(attempt=2), ME, None) is None


def test_heartbeat_refusal_order() -> None:
    assert decide_heartbeat(None, ME) == Refuse(RefusalCode.not_found, "no ops run with this id")
    refusal = decide_heartbeat(row(state="open", claim_owner="worker@b", lease_active=False), ME)
    assert refusal is not None and refusal.code is RefusalCode.state_conflict
    refusal = decide_heartbeat(row(claim_owner="worker@b", lease_active=False), ME)
    assert refusal is not None and refusal.code is RefusalCode.wrong_owner
    refusal = decide_heartbeat(row(lease_active=False), ME)
    assert refusal is not None and refusal.code is RefusalCode.expired_lease
    assert decide_heartbeat(row(), ME) is None
