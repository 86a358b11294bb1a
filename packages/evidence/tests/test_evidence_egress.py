"""`network_egress`: allowlisted keys, closed sets, and a byte bound that always holds."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ops_evidence import (
    MAX_INT,
    MAX_NETWORK_EGRESS_BYTES,
    encoded_size,
    find_bound_violations,
    network_egress,
    normalize_execution_evidence,
)

ALLOWED = {
    "host": "api.provider.example",
    "port": 443,
    "outcome": "allowed",
    "connections": 2,
    "bytes_up": 10,
    "bytes_down": 2000,
}
REFUSED = {"host": "localhost", "port": 80, "outcome": "refused", "reason": "forbidden_address"}


def test_a_valid_value_is_kept_as_sent() -> None:
    value = {
        "mode": "allowlist",
        "allowed": 2,
        "refused": 1,
        "failed": 0,
        "bytes_up": 10,
        "bytes_down": 2000,
        "destinations": [ALLOWED, {**REFUSED, "connections": 1}],
    }
    assert network_egress(value) == value
    assert normalize_execution_evidence({"network_egress": value}) == {"network_egress": value}


def test_open_mode_claims_no_counts() -> None:
    assert network_egress({"mode": "open"}) == {"mode": "open"}


def test_without_a_valid_mode_nothing_survives() -> None:
    raw: object
    for raw in ({}, {"mode": "none"}, {"mode": "OPEN"}, {"mode": 1}, [], "open", None):
        assert network_egress(raw) is None


def test_unknown_keys_bad_counts_and_bad_destinations_are_dropped() -> None:
    raw: dict[Any, Any] = {
        "mode": "allowlist",
        "allowed": True,
        "refused": -1,
        "failed": MAX_INT + 1,
        "bytes_up": math.nan,
        "secret": "sk-123",
        1: "x",
        "destinations": [
            {"outcome": "allowed", "host": "Evil Host\n", "port": 0, "body": "x"},
            {"outcome": "maybe", "host": "a.example"},
            {**REFUSED, "reason": "because"},
            {**ALLOWED, "reason": "not_listed"},  # an allowed one has no reason
            "not a dict",
        ],
    }
    assert network_egress(raw) == {
        "mode": "allowlist",
        "destinations": [
            {"outcome": "allowed"},
            {"host": "localhost", "port": 80, "outcome": "refused"},
            {k: v for k, v in ALLOWED.items()},
        ],
    }


def test_many_large_destinations_are_clipped_to_the_byte_bound() -> None:
    big = {
        "host": "h" * 253,
        "port": 65535,
        "outcome": "failed",
        "reason": "connect_timeout",
        "connections": MAX_INT,
        "bytes_up": MAX_INT,
        "bytes_down": MAX_INT,
    }
    raw = {"mode": "allowlist", "destinations": [big] * 1000}
    value = network_egress(raw)
    assert value is not None
    assert encoded_size(value) <= MAX_NETWORK_EGRESS_BYTES
    assert 1 <= len(value["destinations"]) < 16  # type: ignore[arg-type]
    assert network_egress(value) == value


_json = st.none() | st.booleans() | st.integers() | st.floats() | st.lists(st.integers())
_destination = st.fixed_dictionaries(
    {},
    optional={
        "host": st.sampled_from(["a.example", "h" * 253, "A", "::1", ""]) | st.text(max_size=20),
        "port": st.integers(-5, 70000),
        "outcome": st.sampled_from(["allowed", "refused", "failed", "x"]),
        "reason": st.sampled_from(["not_listed", "connect_failed", "nope"]),
        "connections": st.integers(-1, 2**60),
        "bytes_up": _json,
    },
)


@given(
    st.fixed_dictionaries(
        {"mode": st.sampled_from(["open", "allowlist", "closed"])},
        optional={"destinations": st.lists(_destination, max_size=20), "allowed": _json},
    )
)
def test_any_value_normalizes_within_its_bound_and_idempotently(raw: dict[str, Any]) -> None:
    value = network_egress(raw)
    if value is None:
        return
    assert find_bound_violations(value) == []
    assert encoded_size(value) <= MAX_NETWORK_EGRESS_BYTES
    assert network_egress(value) == value
