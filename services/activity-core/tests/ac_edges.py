"""Edge values for every kind of value activity-core reads from a request: well-formed at
the edges of their types, and malformed just past them.

Each kind has its named edges (every one is sent) and a Hypothesis strategy that mixes
them with generated values of the same shape (sampled with a fixed seed). A value is the
text of a parameter; a `Raw` value is already percent-encoded for a URL (invalid UTF-8,
a lone surrogate's bytes, an encoded NUL), every other value is encoded by the sender.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

__all__ = [
    "CURSORS",
    "HEADER_VALUES",
    "INTEGERS",
    "KINDS",
    "TEXTS",
    "TIMESTAMPS",
    "UUIDS",
    "Raw",
    "cursor",
    "cursors",
    "header_values",
    "integers",
    "sample",
    "texts",
    "timestamps",
    "uuids",
]

T = TypeVar("T")


class Raw(str):
    """A parameter value already percent-encoded for a URL: sent byte for byte."""

    __slots__ = ()


SOME_UUID = "5f1c3a4e-0b7d-4c1a-9e2f-3d4c5b6a7980"

TIMESTAMPS: tuple[str, ...] = (
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+00:00",
    "0001-01-01T00:00:00+14:00",  # UTC value before year 1
    "0001-01-01T00:00:00+23:59",
    "0001-01-01T00:00:00-23:59",
    "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:59:59-14:00",  # UTC value after year 9999
    "9999-12-31T23:59:59.999999-23:59",
    "2016-12-31T23:59:60Z",  # a leap second
    "2026-01-01T00:00:00.000000Z",
    "2026-01-01T00:00:00.9999999Z",  # past microseconds
    "2026-01-01T00:00:00",  # naive
    "2026-01-01",
    "2026-02-30T00:00:00Z",
    "2026-01-01T24:00:00Z",
    "2026-01-01T00:00:00+24:00",
    "2026-01-01T00:00:00+99:99",
    "infinity",
    "-infinity",
    "10000-01-01T00:00:00Z",
    "+275760-09-13T00:00:00Z",
    "-0001-01-01T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "2026-01-01T00:00:00\x00Z",
    "now",
    "",
)

INTEGERS: tuple[str, ...] = (
    "0",
    "-1",
    "1",
    str(2**31 - 1),
    str(2**31),
    str(2**63 - 1),
    str(2**63),
    str(-(2**63) - 1),
    str(2**64),
    "9" * 5000,  # past Python's int() digit limit
    "1e3",
    "1.0",
    "0x10",
    " 1",
    "\uff11",  # a full-width digit
    "NaN",
    "",
)

UUIDS: tuple[str, ...] = (
    "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    SOME_UUID.upper(),
    "{" + SOME_UUID + "}",
    "urn:uuid:" + SOME_UUID,
    SOME_UUID.replace("-", ""),
    SOME_UUID + "0",
    SOME_UUID[:-1],
    SOME_UUID[:-1] + "g",
    SOME_UUID + "\x00",
    "not-a-uuid",
    "",
)

TEXTS: tuple[str, ...] = (
    "\x00",
    "a\x00b",
    "\x01\x1f",
    "\x7f",
    "\x85",  # NEL, a C1 control
    "\x9b[31m",
    "\u202eevil",  # a bidi override
    "zero\u200bwidth",
    "\ufeff",
    "\uffff",
    "\U0010ffff",
    "\ufffd",
    "caf\u00e9 \u2603 \U0001f600",
    " ",
    "x" * 10_000,
    "x" * 128,
    "x" * 129,
    "../../etc/passwd",
    "'; DROP TABLE ops_runs; --",
    "%",
    "\\",
    "",
    Raw("%00"),
    Raw("a%00b"),
    Raw("%ED%A0%80"),  # a lone surrogate's UTF-8 bytes
    Raw("%ED%B0%80x"),
    Raw("%FF%FE"),
    Raw("%C0%AF"),  # an overlong encoding
    Raw("%E2%82"),  # truncated UTF-8
    Raw("%"),
    Raw("%zz"),
)


def cursor(text: str) -> str:
    """A keyset cursor with this content, encoded as the API encodes its own (db/keyset.py:
    base64url of `<timestamp>|<uuid>`, unpadded)."""
    return base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode().rstrip("=")


CURSORS: tuple[str, ...] = (
    # decode cleanly, carry edge values
    cursor(f"0001-01-01T00:00:00+14:00|{SOME_UUID}"),
    cursor(f"9999-12-31T23:59:59-14:00|{SOME_UUID}"),
    cursor(f"0001-01-01T00:00:00+00:00|{SOME_UUID}"),
    cursor(f"9999-12-31T23:59:59.999999+00:00|{SOME_UUID}"),
    cursor(f"0001-01-01T00:00:00+23:59|{SOME_UUID}"),
    cursor(f"2026-01-01T00:00:00|{SOME_UUID}"),  # naive
    cursor(f"2026-01-01T00:00:00+00:00|{{{SOME_UUID}}}"),
    cursor(f"2026-01-01T00:00:00+00:00|urn:uuid:{SOME_UUID}"),
    cursor("2026-01-01T00:00:00+00:00|00000000-0000-0000-0000-000000000000"),
    cursor("2026-01-01T00:00:00+00:00|\x00"),
    cursor(f"2026-01-01T00:00:00+00:00|{SOME_UUID}|extra"),
    cursor(f"2026-01-01T00:00:00+00:00\x00|{SOME_UUID}"),
    cursor(f"10000-01-01T00:00:00+00:00|{SOME_UUID}"),
    cursor(f"0000-01-01T00:00:00+00:00|{SOME_UUID}"),
    cursor(f"infinity|{SOME_UUID}"),
    cursor(f"{2**64}|{SOME_UUID}"),
    cursor('{"at": "2026-01-01T00:00:00Z", "id": 1}'),
    cursor("\ud800|x"),
    cursor(""),
    # do not decode
    base64.urlsafe_b64encode(b"\xff\xfe\x00").decode(),
    "not-a-cursor",
    "====",
    "\x00",
    "x" * 201,
    str(2**63),  # the audit trail's cursor is an id
    str(2**63 - 1),
    "999999999999999999",
    "-1",
    "",
)

HEADER_VALUES: tuple[str | bytes, ...] = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\x01\x7f",
    "\t",
    "x" * 10_000,
    b"\xff\xfe",
    "caf\u00e9".encode(),
    "\u202e".encode(),
    "Bearer",
    "Bearer ",
    "Bearer \x00",
    "bearer x",
    "Basic dXNlcjpwYXNz",
    "null",
    "http://evil.example",
    "same-origin\x00",
    "application/json",
    "application/json; charset=utf-16",
    "application/merge-patch+json",
    "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded; charset=latin-1",
    "text/plain",
    "ops_session=s1." + "A" * 43,
    "ops_session=\x00",
    "ops_session=" + "x" * 5000,
    "a=b; ops_session=; ops_session=x",
)


def _offset(minutes: int) -> timezone:
    return timezone(timedelta(minutes=minutes))


def timestamps() -> st.SearchStrategy[str]:
    aware = st.builds(
        lambda moment, minutes, spec: moment.replace(tzinfo=_offset(minutes)).isoformat(
            timespec=spec
        ),
        st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
        st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1),
        st.sampled_from(["auto", "seconds", "microseconds"]),
    )
    naive = st.datetimes().map(datetime.isoformat)
    return st.one_of(st.sampled_from(TIMESTAMPS), aware, naive)


def integers() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(INTEGERS),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
    )


def uuids() -> st.SearchStrategy[str]:
    shapes: list[Callable[[uuid.UUID], str]] = [
        str,
        lambda u: str(u).upper(),
        lambda u: u.hex,
        lambda u: "{" + str(u) + "}",
        lambda u: u.urn,
    ]
    return st.one_of(
        st.sampled_from(UUIDS),
        st.builds(lambda u, shape: shape(u), st.uuids(), st.sampled_from(shapes)),
    )


def texts() -> st.SearchStrategy[str]:
    # No surrogates here: they cannot travel in a URL except as raw bytes (TEXTS has those).
    characters = st.characters(exclude_categories=["Cs"])
    return st.one_of(
        st.sampled_from(TEXTS),
        st.text(characters, min_size=1, max_size=40),
        st.builds(lambda a, b: a + "\x00" + b, st.text(max_size=5), st.text(max_size=5)),
    )


def cursors() -> st.SearchStrategy[str]:
    crafted = st.builds(
        lambda at, ident: cursor(f"{at}|{ident}"),
        timestamps(),
        st.one_of(uuids(), texts()),
    )
    return st.one_of(st.sampled_from(CURSORS), crafted)


def header_values() -> st.SearchStrategy[str | bytes]:
    return st.one_of(
        st.sampled_from(HEADER_VALUES),
        st.text(st.characters(max_codepoint=0xFF), max_size=40).map(
            lambda text: text.encode("latin-1")
        ),
    )


KINDS: dict[str, tuple[tuple[str, ...], Callable[[], st.SearchStrategy[str]]]] = {
    "instant": (TIMESTAMPS, timestamps),
    "int": (INTEGERS, integers),
    "uuid": (UUIDS, uuids),
    "text": (TEXTS, texts),
    "cursor": (CURSORS, cursors),
}


def sample(strategy: st.SearchStrategy[T], count: int) -> list[T]:
    """`count` values of `strategy`, the same on every run (derandomized, no example
    database): Hypothesis generates, the caller sends."""
    drawn: list[T] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(strategy)
    def collect(value: T) -> None:
        drawn.append(value)

    collect()
    return drawn[:count]
