"""What an operator's requeue or cancel does to a run: pure, so every branch is unit-tested.

Requeue (of the run as read; terminal rows never change, so no lock is needed):
missing row -> not_found; a repeat of an earlier requeue with the same key -> that
successor (checked by the service before this, whatever the state); a run that is not
failed or expired -> state_conflict, saying why; else a successor is made.

Cancel (of the row locked FOR NO KEY UPDATE, so a complete, fail or heartbeat of the
same run waits for it or went first): missing row -> not_found; a terminal row ->
state_conflict (a cancel is never repeated: the run is already over, and the detail says
how); an open or claimed row -> failed, owner and lease cleared.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from activity_core.queue.close_decision import Refuse
from ops_contracts import RefusalCode, RunState
from ops_evidence import sanitize_error

__all__ = [
    "REQUEUABLE_STATES",
    "cancel_error",
    "decide_cancel",
    "decide_requeue",
    "successor_key",
]

REQUEUABLE_STATES = frozenset({RunState.failed, RunState.expired})


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def successor_key(original_id: uuid.UUID, idempotency_key: str | None) -> str:
    """The successor's idempotency key: the original's id and the request's key. Without
    a key the run itself is the key, so a run has at most one keyless successor and a
    repeated keyless requeue answers it again. `/` is in no emitted key (a definition's
    slug cannot hold one), so these never meet an emission's."""
    if idempotency_key is None:
        return f"requeue/{original_id}"
    return f"requeue/{original_id}/{idempotency_key}"


def decide_requeue(row: Row | None) -> Refuse | None:
    """None when a successor may be made of this run."""
    if row is None:
        return Refuse(RefusalCode.not_found, "no ops run with this id")
    state = RunState(row["state"])
    if state in REQUEUABLE_STATES:
        return None
    why = {
        RunState.open: "it is open: it is waiting for a claim already",
        RunState.claimed: "it is claimed: a worker holds it (cancel it first to stop it)",
        RunState.succeeded: "it succeeded: only failed or expired runs are requeued",
    }[state]
    return Refuse(RefusalCode.state_conflict, f"the run cannot be requeued: {why}")


def decide_cancel(row: Row | None) -> Refuse | None:
    """None when the run may be cancelled (it is open or claimed)."""
    if row is None:
        return Refuse(RefusalCode.not_found, "no ops run with this id")
    state = RunState(row["state"])
    if state in (RunState.open, RunState.claimed):
        return None
    if row["cancelled_by"] is not None:
        detail = f"the run was cancelled already, by operator {row['cancelled_by']}"
    else:
        detail = f"the run is already {state.value}: only open or claimed runs are cancelled"
    return Refuse(RefusalCode.state_conflict, detail)


def cancel_error(row: Row, operator: str, reason: str) -> str:
    """The run's `last_error` after a cancel: who cancelled it, whom it took it from, why;
    one bounded line (ops_evidence.sanitize_error, as every stored error)."""
    if row["state"] == RunState.claimed:
        held = f" while {row['claim_owner']} held attempt {row['attempt']}"
    else:
        held = " while it was open"
    return sanitize_error(f"cancelled by operator {operator}{held}: {reason}")
