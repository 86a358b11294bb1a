"""Machine codes and enumerations shared by the queue, the worker and other teams.

These are wire values: the string of each member is what travels in JSON and is
stored in PostgreSQL, so members are never renamed, only added.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "CANCELLED_BY_OPERATOR_DETAIL",
    "CONCLUSIVE_CHANGES_REFUSALS",
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
    """The ``code`` of every non-2xx answer of activity-core: its JSON API's ``ErrorBody``
    and its ops UI's error pages. A client that meets a code it does not know treats it by
    its HTTP status alone."""

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
    # the server itself, before any endpoint: a request line and headers over 64 KiB, or a
    # request that did not arrive whole in time (the connection is closed after either)
    headers_too_large = "headers_too_large"
    request_timeout = "request_timeout"
    # PostgreSQL (or Temporal) cannot be reached: retry after Retry-After
    unavailable = "unavailable"
    # the database is not migrated for this build: run `activity-core migrate`
    schema_not_current = "schema_not_current"
    # no route takes this method at this path
    method_not_allowed = "method_not_allowed"
    # a body of a media type the endpoint does not take: the JSON API takes
    # application/json, the ops UI's forms application/x-www-form-urlencoded
    unsupported_media_type = "unsupported_media_type"
    # the ops UI's sign-in throttle: retry after Retry-After
    too_many_requests = "too_many_requests"
    # a changes bundle (docs/changes.md) that is not what the run may hand over: not a
    # bundle, a digest that does not match, another attempt's ref, a merge, too many
    # commits, a path outside the grant; or a run without a repository grant
    changes_invalid = "changes_invalid"
    # another bundle (another digest) is already stored for this run's attempt
    changes_conflict = "changes_conflict"
    # a changes bundle over ACTIVITY_CORE_CHANGES_MAX_BYTES
    changes_too_large = "changes_too_large"
    # a granted run's complete before its attempt's changes were stored: the worker
    # uploads them and closes again (not conclusive)
    changes_not_stored = "changes_not_stored"
    # reserved: an HTTP error of the framework that no other code names (its 400 for a
    # body it cannot parse; activity-core's body guard refuses such a body first)
    http_error = "http_error"
    # reserved: an unexpected failure (a bug); the detail says nothing more
    internal_error = "internal_error"


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

# An upload of changes refused with one of these will be refused again however often it
# is retried. changes_too_large is conclusive too: the same bytes stay too large.
CONCLUSIVE_CHANGES_REFUSALS: frozenset[RefusalCode] = frozenset(
    {
        *CONCLUSIVE_CLOSE_REFUSALS,
        RefusalCode.changes_invalid,
        RefusalCode.changes_conflict,
        RefusalCode.changes_too_large,
    }
)

# How the `detail` of a close's terminal_conflict (and a heartbeat's state_conflict)
# begins when the run was cancelled by an operator, the operator's name following: the
# one terminal conflict a worker expects (its run was cancelled while it worked), which it
# settles instead of quarantining. Every other terminal_conflict detail begins otherwise.
CANCELLED_BY_OPERATOR_DETAIL = "the run was cancelled by operator "

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
        RefusalCode.headers_too_large: 431,
        RefusalCode.request_timeout: 408,
        RefusalCode.unavailable: 503,
        RefusalCode.schema_not_current: 503,
        RefusalCode.method_not_allowed: 405,
        RefusalCode.unsupported_media_type: 415,
        RefusalCode.too_many_requests: 429,
        RefusalCode.changes_invalid: 422,
        RefusalCode.changes_conflict: 409,
        RefusalCode.changes_too_large: 413,
        RefusalCode.changes_not_stored: 409,
        RefusalCode.http_error: 400,
        RefusalCode.internal_error: 500,
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
