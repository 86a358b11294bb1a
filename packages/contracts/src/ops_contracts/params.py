"""The kinds of value a caller names in a path, a query or a form field of activity-core,
and the one rule for each that holds before any of them reaches the database.

- **Text** (an automation, a repository, an audit target, a fire's run id): 1 to n
  characters, each printable (``str.isprintable``): no control character (C0, DEL, C1;
  PostgreSQL text cannot hold NUL at all), no format character (bidi overrides,
  zero-width), no surrogate, private-use or unassigned code point. Such a value names
  nothing this service stores, and it would reach logs and the operator's pages.
- **Instant** (``created_after``, ``since``, a keyset cursor's time): a time with a zone
  whose UTC value exists. ``0001-01-01T00:00:00+14:00`` is a valid ISO time whose UTC
  value lies before year 1, which the driver cannot send.

The JSON API applies them as parameter types (``Printable``, ``Instant``), the ops UI's
forms and the cursor decoder by the functions (``text_error``, ``in_utc``): one rule per
kind, worded as each door words a refusal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime

__all__ = ["TEXT_SCHEMA_PATTERN", "Instant", "Printable", "in_utc", "text_error"]

# What JSON Schema can say of the text rule (no Unicode categories in its regexes): the
# validator also refuses the other characters that are not printable.
TEXT_SCHEMA_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"


def text_error(value: str, max_length: int) -> str | None:
    """Why ``value`` is not text of at most ``max_length`` printable characters, or None."""
    if not value:
        return "must not be empty"
    if len(value) > max_length:
        return f"at most {max_length} characters"
    if not value.isprintable():
        return "only printable characters (no control, format or unassigned characters)"
    return None


def _printable(value: str | None) -> str | None:
    # The length is the parameter's own bound (Query/Path max_length); this is the rest.
    if value is not None and not value.isprintable():
        raise ValueError("only printable characters (no control, format or unassigned ones)")
    return value


# A parameter's metadata: `Annotated[str | None, Query(max_length=...), Printable]`.
Printable = AfterValidator(_printable)


def in_utc(value: datetime) -> datetime:
    """``value`` in UTC; ValueError for a naive time or one whose UTC value does not exist."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("the time has no timezone")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time is out of range in UTC") from None


Instant = Annotated[AwareDatetime, AfterValidator(in_utc)]
