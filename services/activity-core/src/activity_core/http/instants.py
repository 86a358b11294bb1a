"""A point in time an operator names in a query (`created_after`, `since`): a timestamp
with a timezone whose UTC value exists. `0001-01-01T00:00:00+14:00` is a valid ISO time
whose UTC value lies before year 1, which the driver cannot send: a 422, never a 500."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime

__all__ = ["Instant"]


def _in_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time is out of range in UTC") from None


Instant = Annotated[AwareDatetime, AfterValidator(_in_utc)]
