"""`find_bound_violations`: the outbox bounds, reported by path, for any Python object."""

from __future__ import annotations

import time

import pytest

from ops_evidence import (
    MAX_COLLECTION_ITEMS,
    MAX_DEPTH,
    MAX_ENCODED_BYTES,
    MAX_INT,
    MAX_KEY_CHARS,
    MAX_STRING_CHARS,
    MIN_INT,
    BoundViolation,
    encoded_size,
    find_bound_violations,
    is_bounded_json,
)


def reasons(value: object) -> list[tuple[str, str]]:
    return [(v.path, v.reason) for v in find_bound_violations(value)]


def nested_lists(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_encoded_size_is_the_canonical_utf8_encoding() -> None:
    value = {"b": [1, 2.5, None, True], "a": "é😀"}
    canonical = '{"a":"é😀","b":[1,2.5,null,true]}'
    assert encoded_size(value) == len(canonical.encode("utf-8"))
    assert encoded_size(value) == 36


@pytest.mark.parametrize("value", [float("nan"), "\ud800", {1, 2}])
def test_encoded_size_refuses_what_the_encoder_refuses(value: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        encoded_size(value)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -1.5,
        "",
        [],
        {},
        MIN_INT,
        MAX_INT,
        "x" * MAX_STRING_CHARS,
        {"k" * MAX_KEY_CHARS: 1},
        list(range(MAX_COLLECTION_ITEMS)),
        nested_lists(MAX_DEPTH),
        {"a": [{"b": [None]}], "c d": "é😀"},
    ],
)
def test_bounded_values_have_no_violations(value: object) -> None:
    assert find_bound_violations(value) == []
    assert is_bounded_json(value)


def test_each_bound_is_reported_at_its_path() -> None:
    value = {
        "a": {"b": [0, 1, 2, float("nan")]},
        "inf": float("-inf"),
        "big": MAX_INT + 1,
        "small": MIN_INT - 1,
        "long": "x" * (MAX_STRING_CHARS + 1),
        "k" * (MAX_KEY_CHARS + 1): None,
        "many": list(range(MAX_COLLECTION_ITEMS + 1)),
        "odd key": "\udfff",
    }
    assert reasons(value) == [
        ("$.a.b[3]", "float is not finite"),
        ("$.inf", "float is not finite"),
        ("$.big", "integer out of range"),
        ("$.small", "integer out of range"),
        ("$.long", "string too long"),
        ("$[<key 5>]", "key too long"),
        ("$.many", "too many items"),
        ('$["odd key"]', "string is not valid Unicode"),
    ]


def test_bool_is_a_json_bool_not_an_out_of_range_int() -> None:
    assert find_bound_violations([True, False]) == []


@pytest.mark.parametrize(
    ("value", "kind"),
    [((1, 2), "tuple"), ({1}, "set"), (b"x", "bytes"), (object(), "object")],
)
def test_non_json_types_are_violations(value: object, kind: str) -> None:
    assert reasons({"x": value}) == [("$.x", f"not a JSON value: {kind}")]


def test_subclasses_of_json_types_are_not_json() -> None:
    class Text(str):
        pass

    class Mapping(dict[str, object]):
        pass

    assert reasons([Text("x"), Mapping()]) == [
        ("$[0]", "not a JSON value: Text"),
        ("$[1]", "not a JSON value: Mapping"),
    ]


def test_non_string_and_unencodable_keys() -> None:
    assert reasons({1: "a", "\ud800": "b"}) == [
        ("$[<key 0>]", "key is not a string"),
        ("$[<key 1>]", "key is not valid Unicode"),
    ]


def test_depth_counts_the_top_level_container_as_one() -> None:
    assert find_bound_violations(nested_lists(MAX_DEPTH)) == []
    assert reasons(nested_lists(MAX_DEPTH + 1)) == [("$" + "[0]" * MAX_DEPTH, "nesting too deep")]


def test_a_100000_deep_list_is_reported_without_recursion_error() -> None:
    assert reasons(nested_lists(100_000)) == [("$" + "[0]" * MAX_DEPTH, "nesting too deep")]


def test_cycles_are_too_deep_not_infinite() -> None:
    cyclic: dict[str, object] = {}
    cyclic["a"] = cyclic
    assert reasons(cyclic) == [("$" + ".a" * MAX_DEPTH, "nesting too deep")]


def test_a_huge_fan_out_stops_at_the_size_bound_quickly() -> None:
    # Every node is within its own limits, but 100**8 of them would never be walked.
    level: object = list(range(MAX_COLLECTION_ITEMS))
    for _ in range(MAX_DEPTH - 1):
        level = [level] * MAX_COLLECTION_ITEMS
    started = time.monotonic()
    found = find_bound_violations(level)
    assert time.monotonic() - started < 1
    assert found == [BoundViolation("$", "encoded size too large")]


def filled_to(size: int) -> list[str]:
    """A list of strings whose canonical encoding is exactly `size` bytes."""
    full = "x" * MAX_STRING_CHARS
    items: list[str] = []
    while encoded_size([*items, full]) <= size - 3:
        items.append(full)
    rest = size - encoded_size([*items, ""])
    items.append("x" * rest)
    assert encoded_size(items) == size
    return items


def test_encoded_size_at_the_bound_is_allowed() -> None:
    value = filled_to(MAX_ENCODED_BYTES)
    assert len(value) <= MAX_COLLECTION_ITEMS
    assert find_bound_violations(value) == []


def test_encoded_size_one_byte_over_the_bound_is_a_violation() -> None:
    assert reasons(filled_to(MAX_ENCODED_BYTES + 1)) == [("$", "encoded size too large")]


def test_multibyte_characters_count_as_bytes_not_characters() -> None:
    value = ["😀" * 2000] * 9  # 18,000 characters but 72,000+ bytes
    assert reasons(value) == [("$", "encoded size too large")]
