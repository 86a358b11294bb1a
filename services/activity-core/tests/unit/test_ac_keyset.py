"""Keyset cursors (db/keyset.py): the API's own round-trip, and crafted cursors that decode
cleanly but carry what the driver cannot send, refused as InvalidCursor."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ac_edges import CURSORS, cursor, cursors
from activity_core.db.keyset import InvalidCursor, decode_cursor, encode_cursor

ROW = uuid.UUID("5f1c3a4e-0b7d-4c1a-9e2f-3d4c5b6a7980")


@given(st.datetimes(timezones=st.just(UTC)), st.uuids())
def test_a_cursor_the_api_issued_decodes_to_its_row(at: datetime, row_id: uuid.UUID) -> None:
    assert decode_cursor(encode_cursor(at, row_id)) == (at, row_id)


@pytest.mark.parametrize(
    "text",
    [
        f"0001-01-01T00:00:00+14:00|{ROW}",  # before year 1 in UTC
        f"9999-12-31T23:59:59-14:00|{ROW}",  # after year 9999 in UTC
        f"2026-01-01T00:00:00|{ROW}",  # naive
        "2026-01-01T00:00:00+00:00|\x00",
        f"10000-01-01T00:00:00+00:00|{ROW}",
    ],
)
def test_a_crafted_cursor_the_driver_cannot_send_is_invalid(text: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(cursor(text))


def test_a_cursor_at_the_edges_of_utc_decodes_in_utc() -> None:
    at, row_id = decode_cursor(cursor(f"0001-01-01T13:59:00+13:59|{ROW}"))
    assert at == datetime(1, 1, 1, tzinfo=UTC) and at.tzinfo is UTC and row_id == ROW


@given(st.one_of(st.sampled_from(CURSORS), cursors(), st.text()))
def test_any_cursor_decodes_to_a_utc_time_or_is_invalid(value: str) -> None:
    try:
        at, _ = decode_cursor(value)
    except InvalidCursor:
        return
    assert at.tzinfo is UTC
