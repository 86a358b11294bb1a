"""Keyset pagination cursors: an opaque token for the (timestamp, id) of a page's last row.

Both listings (ops runs, automation fires) order by a timestamp then an id, newest first;
the cursor lets the next query continue strictly after that pair without OFFSET.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import datetime

from ops_contracts import in_utc

__all__ = ["InvalidCursor", "decode_cursor", "encode_cursor"]


class InvalidCursor(ValueError):
    """The token was not issued by encode_cursor."""


def encode_cursor(at: datetime, row_id: uuid.UUID) -> str:
    raw = f"{at.isoformat()}|{row_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at_text, _, ident = base64.urlsafe_b64decode(padded).decode().partition("|")
        # A cursor carries an instant like any other: its UTC value must exist (a crafted
        # `0001-01-01T00:00:00+14:00` decodes cleanly, and the driver could not send it).
        return in_utc(datetime.fromisoformat(at_text)), uuid.UUID(ident)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidCursor("cursor is not one this API issued") from exc
