"""Everything the queue client raises.

Messages carry the HTTP status and the machine `code` only. The server's `detail`
text and any response body stay out: exception messages end up in logs, and the
outbox keeps only an exception's class name.
"""

from __future__ import annotations

from ops_contracts import RefusalCode
from rein_aharness.outbox.errors import ConclusiveRefusalError

__all__ = [
    "ChangesRefusedError",
    "CloseRefusedError",
    "QueueAuthError",
    "QueueError",
    "QueueProtocolError",
    "QueueRefusedError",
    "QueueRejectedError",
    "QueueTransientError",
    "QueueTransportError",
    "QueueUnavailableError",
]


class QueueError(Exception):
    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        self.status = status
        self.code = code
        super().__init__(message)


class QueueTransientError(QueueError):
    """Activity Core could not be reached or answered 5xx, after the bounded retries.

    An outbox entry that meets this stays pending.
    """


class QueueTransportError(QueueTransientError):
    """Connect, read or write failure, or a timeout: no HTTP response at all."""


class QueueUnavailableError(QueueTransientError):
    """A 5xx response."""


class QueueAuthError(QueueError):
    """401 `unauthenticated` or 403 `forbidden` / `worker_identity_mismatch`.

    A configuration problem, so never retried; an outbox entry stays pending until the
    credentials are fixed.
    """


class QueueRefusedError(QueueError):
    """A documented refusal code on claim or heartbeat (e.g. `expired_lease`).

    Closes raise `CloseRefusedError` instead.
    """


class QueueRejectedError(QueueError):
    """Any other non-2xx: `invalid_request`, `request_too_large`, or a status and body
    that do not match the documented refusal table (a proxy's 404 page, say).

    Unclassified, so a close that meets it stays pending rather than being quarantined.
    """


class QueueProtocolError(QueueError):
    """A 2xx whose body is not the documented shape."""


class CloseRefusedError(ConclusiveRefusalError):
    """A close answered with one of the six conclusive close codes and its documented
    status: the outbox quarantines the entry (it is the outbox's ConclusiveRefusalError),
    a direct close reports it refused.

    `cancelled_by_operator`: a terminal_conflict whose detail says an operator cancelled
    the run (ops_contracts.CANCELLED_BY_OPERATOR_DETAIL): an expected end of the run, not
    a close gone wrong; the outbox settles it as `cancelled` (close_delivery.py)."""

    def __init__(
        self, code: RefusalCode, status: int | None = None, *, cancelled_by_operator: bool = False
    ) -> None:
        super().__init__(code)
        self.status = status
        self.cancelled_by_operator = cancelled_by_operator


class ChangesRefusedError(ConclusiveRefusalError):
    """A changes upload (`PUT /ops-runs/{id}/changes`) answered with a conclusive code and
    its documented status: a fencing code (`not_found`, `wrong_owner`, `expired_lease`,
    `state_conflict`, `terminal_conflict`: the close would be refused the same way, or it
    already was taken) or `changes_invalid`, `changes_conflict`, `changes_too_large` (the
    same bytes are refused again: the entry is quarantined with that code)."""

    def __init__(self, code: RefusalCode, status: int | None = None) -> None:
        super().__init__(code)
        self.status = status
