"""Domain errors of the queue: what happened, in the vocabulary of the spec."""

from __future__ import annotations

from ops_contracts import RefusalCode


class QueueRefusal(Exception):
    """A request the queue refuses, with its machine code and a human detail; an
    `invalid_request` also names where the bad value was (`loc`, e.g. ("query", "cursor"))."""

    def __init__(self, code: RefusalCode, detail: str, *, loc: tuple[str, ...] = ()) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.loc = loc


class DatabaseUnavailable(Exception):
    """PostgreSQL could not be reached or answered with a connection-level failure."""
