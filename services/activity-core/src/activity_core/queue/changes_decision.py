"""What an upload of a run's changes does, given its locked row: pure, like a close's.

The fence is a complete's (close_decision.decide_close), in the same order: a missing
row (not_found); a terminal row; an open one (state_conflict); another owner
(wrong_owner); an ended lease or another attempt than the current one (expired_lease).
Then the upload's own: a run without a repository grant has no changes to hand over
(changes_invalid), and a row already stored for the attempt answers the repeat of its
digest (AlreadyStored) and refuses another one (changes_conflict).

A terminal row is judged like a close's repeat: its last owner repeating the upload of
the attempt it closed, with the digest stored for it, is answered as stored (the worker
lost the answer and replays upload-then-close; its close then reconciles); anything
else is terminal_conflict.
"""

from __future__ import annotations

from dataclasses import dataclass

from activity_core.queue.close_decision import Refuse, Row, decide_heartbeat
from ops_contracts import CANCELLED_BY_OPERATOR_DETAIL, TERMINAL_STATES, RefusalCode, RunState

__all__ = ["AlreadyStored", "StoreChanges", "decide_upload"]


@dataclass(frozen=True)
class AlreadyStored:
    """The same digest is stored for this attempt: answer it (200), store nothing."""


@dataclass(frozen=True)
class StoreChanges:
    """Verify the bundle (if not yet) and store it for this attempt (201)."""


UploadDecision = Refuse | AlreadyStored | StoreChanges


def decide_upload(
    row: Row | None,
    worker_id: str,
    attempt: int,
    *,
    digest: str,
    stored_digest: str | None,
) -> UploadDecision:
    """`stored_digest`: the digest already stored for (run, `attempt`), or None."""
    if row is not None and RunState(row["state"]) in TERMINAL_STATES:
        if (
            stored_digest == digest
            and row["claim_owner"] == worker_id
            and int(row["attempt"]) == attempt
            and row["cancelled_by"] is None
        ):
            return AlreadyStored()
        if row["cancelled_by"] is not None:
            detail = CANCELLED_BY_OPERATOR_DETAIL + str(row["cancelled_by"])
        else:
            detail = f"the run is already {row['state']}; its changes can no longer change"
        return Refuse(RefusalCode.terminal_conflict, detail)
    # not_found, state_conflict (open), wrong_owner, expired_lease: a close's fence
    refused = decide_heartbeat(row, worker_id, attempt)
    if refused is not None:
        return refused
    assert row is not None
    if row["repository_grant"] is None:
        return Refuse(
            RefusalCode.changes_invalid,
            "the run was queued without a repository grant: it has no changes to hand over",
        )
    if stored_digest is None:
        return StoreChanges()
    if stored_digest == digest:
        return AlreadyStored()
    return Refuse(
        RefusalCode.changes_conflict,
        f"other changes ({stored_digest}) are already stored for attempt {attempt}",
    )
