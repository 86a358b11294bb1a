"""The rules for a parameter's text and instants (ops_contracts.params): what reaches the
database is printable text and an instant whose UTC value exists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from ops_contracts import Instant, in_utc, text_error

INSTANT = TypeAdapter(Instant)


@pytest.mark.parametrize(
    "value",
    ["\x00", "a\x00b", "\x1f", "\x7f", "\x85", "\u202eabc", "zero\u200bwidth", "\uffff", ""],
)
def test_text_that_is_not_printable_or_empty_is_refused(value: str) -> None:
    assert text_error(value, 128) is not None


def test_text_is_bounded_by_its_parameter() -> None:
    assert text_error("x" * 128, 128) is None
    assert text_error("x" * 129, 128) == "at most 128 characters"
    assert text_error("caf\u00e9 \u2603", 128) is None


@pytest.mark.parametrize(
    "value",
    [
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "2026-01-01T00:00:00",  # naive
        "infinity",
        "2016-12-31T23:59:60Z",
        "10000-01-01T00:00:00Z",
    ],
)
def test_an_instant_without_a_utc_value_is_refused(value: str) -> None:
    with pytest.raises(ValidationError):
        INSTANT.validate_python(value)


def test_an_instant_at_the_edges_of_utc_is_taken_in_utc() -> None:
    assert INSTANT.validate_python("0001-01-01T00:00:00Z") == datetime(1, 1, 1, tzinfo=UTC)
    assert INSTANT.validate_python("0001-01-01T13:59:00+13:59") == datetime(1, 1, 1, tzinfo=UTC)
    assert INSTANT.validate_python("9999-12-31T23:59:59.999999Z").tzinfo is UTC


@given(
    st.datetimes(),
    st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1),
)
def test_in_utc_answers_a_utc_time_or_a_value_error_never_an_overflow(
    moment: datetime, minutes: int
) -> None:
    aware = moment.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    try:
        converted = in_utc(aware)
    except ValueError:
        return
    assert converted == aware and converted.tzinfo is UTC


def test_in_utc_refuses_a_naive_time() -> None:
    with pytest.raises(ValueError, match="no timezone"):
        in_utc(datetime(2026, 1, 1))
