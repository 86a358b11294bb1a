"""canonical_json / digest_hex: the byte-exact basis of every digest."""

import hashlib
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ops_contracts import canonical_json, digest_hex

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def test_sorted_compact_utf8() -> None:
    assert canonical_json({"b": 1, "a": [True, None, "é"]}) == (
        '{"a":[true,null,"é"],"b":1}'.encode()
    )


def test_key_order_does_not_matter() -> None:
    assert canonical_json({"a": 1, "b": {"y": 2, "x": 3}}) == canonical_json(
        {"b": {"x": 3, "y": 2}, "a": 1}
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, {"a": [math.nan]}])
def test_non_finite_numbers_are_refused(value: object) -> None:
    with pytest.raises(ValueError):
        canonical_json(value)


@pytest.mark.parametrize(
    "value",
    [
        {1: "a"},
        {"a": {None: 1}},
        [{(1, 2): 3}],
        # a non-string key deep inside lists and objects, and inside a tuple
        {"a": [{"b": {2: "x"}}]},
        [[{3: "x"}]],
        ({"a": {1: "b"}},),
        object(),
        {"a": {1, 2}},
        b"bytes",
        "\ud800",
    ],
)
def test_non_json_values_are_refused(value: object) -> None:
    with pytest.raises(ValueError):
        canonical_json(value)


def test_circular_and_deep_values_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        canonical_json(loop)
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError):
        canonical_json(deep)


def test_digest_is_domain_separated_sha256() -> None:
    value = {"k": "v"}
    expected = hashlib.sha256(b"dom/v1\n" + b'{"k":"v"}').hexdigest()
    assert digest_hex(value, domain="dom/v1") == expected
    assert digest_hex(value, domain="other/v1") != expected


@pytest.mark.parametrize("domain", ["", "a\nb"])
def test_digest_domain_must_be_one_line(domain: str) -> None:
    with pytest.raises(ValueError):
        digest_hex({}, domain=domain)


@given(json_values)
def test_canonical_json_is_deterministic_and_round_trips(value: object) -> None:
    import json

    encoded = canonical_json(value)
    assert canonical_json(json.loads(encoded)) == encoded


@given(st.dictionaries(st.text(max_size=6), st.integers(), max_size=8))
def test_insertion_order_never_changes_the_digest(mapping: dict[str, int]) -> None:
    reordered = dict(reversed(list(mapping.items())))
    assert digest_hex(mapping, domain="t") == digest_hex(reordered, domain="t")
