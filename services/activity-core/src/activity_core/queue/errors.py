"""Domain errors of the queue: what happened, in the vocabulary of the spec."""

from __future__ import annotations

import uuid
from datetime import datetime

# Defined with the driver failures it stands for (db/unavailable.py); named here with the
# queue's other errors, where the routes and the services have always found it.
from activity_core.db.keyset import InvalidCursor, decode_cursor
from activity_core.db.unavailable import DatabaseUnavailable
from ops_contracts import RefusalCode

__all__ = ["DatabaseUnavailable", "QueueRefusal", "query_cursor"]


class QueueRefusal(Exception):
    """A request the queue refuses, with its machine code and a human detail; an
    `invalid_request` also names where the bad value was (`loc`, e.g. ("query", "cursor"))."""

    def __init__(self, code: RefusalCode, detail: str, *, loc: tuple[str, ...] = ()) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.loc = loc


def query_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """A page's `cursor` query parameter, decoded (db/keyset.py); one that is not a cursor
    this service made is an `invalid_request` at ("query", "cursor")."""
    try:
        return decode_cursor(cursor)
    except InvalidCursor as exc:
        raise QueueRefusal(RefusalCode.invalid_request, str(exc), loc=("query", "cursor")) from exc
