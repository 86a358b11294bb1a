"""What a complete or fail does to a locked row: pure, so every branch is unit-testable.

The order of refusals is the one the interface decisions fix: missing row, terminal row
(reconciled or terminal_conflict), open row, another owner, ended lease or a stale
attempt (both expired_lease), grant evidence, and for a granted complete the changes
stored for the run's current attempt (docs/changes.md): none is changes_not_stored (the
worker uploads them and completes again; nothing changed), changes that do not match
the evidence (digest, baseline, head_after, commits) are evidence_conflict.

A run an operator cancelled is failed with no recorded close and no owner: every close
of it is terminal_conflict and every heartbeat state_conflict, and their detail says who
cancelled it, beginning with ops_contracts.CANCELLED_BY_OPERATOR_DETAIL (the worker
holding it learns it on its next heartbeat, or settles its close as cancelled).

Fencing: a request that names its `attempt` belongs to one claim of the run. When the run
has been claimed again since (its lease ended and it was reopened and claimed, perhaps by
the same worker), the request is stale: expired_lease, exactly where an ended lease is
refused. A terminal row is judged before that, by its recorded close alone: an exact
repeat by its owner is reconciled whatever attempt it names, anything else conflicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from activity_core.queue.grant_evidence import changes_evidence_problem, grant_evidence_problem
from ops_contracts import (
    CANCELLED_BY_OPERATOR_DETAIL,
    TERMINAL_STATES,
    CloseAction,
    RefusalCode,
    RunState,
)

__all__ = [
    "ApplyTerminal",
    "CloseRequest",
    "Reconcile",
    "Refuse",
    "ReopenRun",
    "decide_close",
    "decide_heartbeat",
    "terminal_state_without_row",
]


class Row(Protocol):
    """A locked ops_runs row as the driver returns it (asyncpg.Record, or a dict in tests)."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True)
class CloseRequest:
    action: CloseAction
    worker_id: str
    result: dict[str, Any] | None
    error: str | None
    reopen: bool
    intent_digest: str
    # the claim the close belongs to (fencing); None: not checked
    attempt: int | None = None
    # canonical_json of `result`, when the digest already encoded it (stored as is)
    result_json: str | None = None


@dataclass(frozen=True)
class Refuse:
    code: RefusalCode
    detail: str


@dataclass(frozen=True)
class Reconcile:
    """The exact repeat of the recorded close by its owner: answer, change nothing."""


@dataclass(frozen=True)
class ApplyTerminal:
    state: RunState


@dataclass(frozen=True)
class ReopenRun:
    """A failure with reopen below the attempt ceiling: back to open, not terminal."""


CloseDecision = Refuse | Reconcile | ApplyTerminal | ReopenRun


def decide_close(
    row: Row | None,
    request: CloseRequest,
    *,
    max_attempts: int,
    stored_changes: Row | None = None,
) -> CloseDecision:
    """`stored_changes`: the ops_run_changes row of the run's current attempt (its facts,
    without the bundle), or None when there is none; read only for a granted complete."""
    if row is None:
        return Refuse(RefusalCode.not_found, "no ops run with this id")

    state = RunState(row["state"])
    if state in TERMINAL_STATES:
        recorded = row["close_intent_digest"]
        if (
            recorded is not None
            and recorded == request.intent_digest
            and row["claim_owner"] == request.worker_id
        ):
            return Reconcile()
        if row["cancelled_by"] is not None:
            detail = CANCELLED_BY_OPERATOR_DETAIL + str(row["cancelled_by"])
        elif recorded is None:
            detail = f"the run is already {state.value} and has no recorded close to match"
        else:
            detail = f"the run is already {state.value} with a different close"
        return Refuse(RefusalCode.terminal_conflict, detail)

    if state is RunState.open:
        return Refuse(RefusalCode.state_conflict, "the run is open, not claimed")
    if row["claim_owner"] != request.worker_id:
        return Refuse(RefusalCode.wrong_owner, "the run is claimed by another worker")
    lease_refusal = _lease_refusal(row, request.attempt)
    if lease_refusal is not None:
        return lease_refusal

    transaction = (request.result or {}).get("repository_transaction")
    problem = grant_evidence_problem(request.action, row["repository_grant"], transaction)
    if problem is not None:
        return Refuse(RefusalCode.evidence_conflict, problem)

    if request.action is CloseAction.complete and row["repository_grant"] is not None:
        if stored_changes is None:
            return Refuse(
                RefusalCode.changes_not_stored,
                f"no changes are stored for attempt {row['attempt']}: upload them "
                "(PUT /ops-runs/{run_id}/changes), then complete again",
            )
        mismatch = changes_evidence_problem(request.result, stored_changes)
        if mismatch is not None:
            return Refuse(RefusalCode.evidence_conflict, mismatch)

    if request.action is CloseAction.complete:
        return ApplyTerminal(RunState.succeeded)
    if request.reopen and int(row["attempt"]) < max_attempts:
        return ReopenRun()
    return ApplyTerminal(RunState.failed)


def _lease_refusal(row: Row, attempt: int | None) -> Refuse | None:
    """expired_lease when the claim's lease has ended or the request names another
    attempt than the run's current one."""
    if not row["lease_active"]:
        return Refuse(RefusalCode.expired_lease, "the claim's lease has ended")
    if attempt is not None and attempt != int(row["attempt"]):
        return Refuse(
            RefusalCode.expired_lease,
            f"attempt {attempt} is not the run's current attempt ({row['attempt']})",
        )
    return None


def terminal_state_without_row(request: CloseRequest) -> RunState | None:
    """The state this close reaches on any row claimed by its worker under an active lease,
    at the attempt the close names (if it names one), and queued without a repository
    grant; or None when that needs the row (a reopen can stay below the ceiling) or can
    never apply (the result claims a grant).

    The service tries exactly that case in one statement (queries.CLOSE_LEASED_UNGRANTED)
    before locking the row and asking decide_close.
    """
    if request.action is CloseAction.complete:
        state = RunState.succeeded
    elif not request.reopen:
        state = RunState.failed
    else:
        return None
    transaction = (request.result or {}).get("repository_transaction")
    if grant_evidence_problem(request.action, None, transaction) is not None:
        return None
    return state


def decide_heartbeat(row: Row | None, worker_id: str, attempt: int | None = None) -> Refuse | None:
    """None when the lease may be extended: 404, then state_conflict unless claimed, then
    wrong_owner, then expired_lease (an ended lease, or `attempt` not the current one)."""
    if row is None:
        return Refuse(RefusalCode.not_found, "no ops run with this id")
    if row["state"] != RunState.claimed:
        if row["cancelled_by"] is not None:
            detail = CANCELLED_BY_OPERATOR_DETAIL + str(row["cancelled_by"])
            return Refuse(RefusalCode.state_conflict, detail)
        return Refuse(RefusalCode.state_conflict, f"the run is {row['state']}, not claimed")
    if row["claim_owner"] != worker_id:
        return Refuse(RefusalCode.wrong_owner, "the run is claimed by another worker")
    return _lease_refusal(row, attempt)
