"""Machine codes and enumerations shared by the queue, the worker and other teams.

These are wire values: the string of each member is what travels in JSON and is
stored in PostgreSQL, so members are never renamed, only added.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "CONCLUSIVE_CLOSE_REFUSALS",
    "REFUSAL_HTTP_STATUS",
    "TERMINAL_STATES",
    "CloseAction",
    "CloseDisposition",
    "LabelsMode",
    "Priority",
    "RefusalCode",
    "RunState",
    "SourceType",
]


class RefusalCode(StrEnum):
    """The ``code`` of every non-2xx queue response."""

    not_found = "not_found"
    wrong_owner = "wrong_owner"
    expired_lease = "expired_lease"
    state_conflict = "state_conflict"
    evidence_conflict = "evidence_conflict"
    terminal_conflict = "terminal_conflict"
    unauthenticated = "unauthenticated"
    forbidden = "forbidden"
    worker_identity_mismatch = "worker_identity_mismatch"
    invalid_request = "invalid_request"
    request_too_large = "request_too_large"


# A close refused with one of these will be refused again however often it is
# retried, so the worker's outbox quarantines it instead of retrying forever.
# Anything else (auth, transport, 5xx) may be transient and stays pending.
CONCLUSIVE_CLOSE_REFUSALS: frozenset[RefusalCode] = frozenset(
    {
        RefusalCode.not_found,
        RefusalCode.wrong_owner,
        RefusalCode.expired_lease,
        RefusalCode.state_conflict,
        RefusalCode.evidence_conflict,
        RefusalCode.terminal_conflict,
    }
)

# One table so the exception handler and the OpenAPI description cannot drift.
REFUSAL_HTTP_STATUS: Mapping[RefusalCode, int] = MappingProxyType(
    {
        RefusalCode.not_found: 404,
        RefusalCode.wrong_owner: 409,
        RefusalCode.expired_lease: 409,
        RefusalCode.state_conflict: 409,
        RefusalCode.evidence_conflict: 409,
        RefusalCode.terminal_conflict: 409,
        RefusalCode.unauthenticated: 401,
        RefusalCode.forbidden: 403,
        RefusalCode.worker_identity_mismatch: 403,
        RefusalCode.invalid_request: 422,
        RefusalCode.request_too_large: 413,
    }
)


class CloseDisposition(StrEnum):
    """How a successful complete/fail was taken.

    ``reconciled`` answers an exact repeat of an already recorded terminal
    close (a lost response); ``reopened`` is a failure with ``reopen: true``
    below the attempt ceiling, which returns the run to ``open``.
    """

    applied = "applied"
    reconciled = "reconciled"
    reopened = "reopened"


class RunState(StrEnum):
    open = "open"
    claimed = "claimed"
    succeeded = "succeeded"
    failed = "failed"
    expired = "expired"


# A run in one of these states never changes again; closes against it can only
# reconcile or conflict.
TERMINAL_STATES: frozenset[RunState] = frozenset(
    {RunState.succeeded, RunState.failed, RunState.expired}
)


class Priority(StrEnum):
    low = "low"
    medium = "medium"
    high = "high"


class LabelsMode(StrEnum):
    """``any``: a run needs one of the claim's labels; ``all``: every one."""

    any = "any"
    all = "all"


class CloseAction(StrEnum):
    complete = "complete"
    fail = "fail"


class SourceType(StrEnum):
    rule = "rule"
    instruction = "instruction"
