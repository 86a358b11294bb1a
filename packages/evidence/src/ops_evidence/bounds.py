"""The JSON bounds every stored or replayed result must satisfy.

These are the limits of the close-evidence outbox ("finite JSON values, bounded depth,
collection size, string length, integer range, key length, and a total encoded size of
64 KiB"). Activity Core and rein-aharness both check a result with
`find_bound_violations` before they store, send or replay it, so the two ends agree on
what "bounded" means.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from typing import TypeAlias

__all__ = [
    "MAX_COLLECTION_ITEMS",
    "MAX_DEPTH",
    "MAX_ENCODED_BYTES",
    "MAX_ERROR_CHARS",
    "MAX_IDENTIFIER_CHARS",
    "MAX_INT",
    "MAX_KEY_CHARS",
    "MAX_STRING_CHARS",
    "MIN_INT",
    "BoundViolation",
    "encoded_size",
    "find_bound_violations",
    "is_bounded_json",
]

# A top-level container is depth 1; a container inside it is depth 2.
MAX_DEPTH = 8
MAX_COLLECTION_ITEMS = 100
MAX_STRING_CHARS = 2048
MAX_KEY_CHARS = 64
# The integers an IEEE double (and so every JavaScript or PostgreSQL jsonb consumer) holds
# exactly; a larger one would silently change on its way through another parser.
MIN_INT = -(2**53 - 1)
MAX_INT = 2**53 - 1
MAX_ENCODED_BYTES = 65536
MAX_IDENTIFIER_CHARS = 256
MAX_ERROR_CHARS = 2048

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def encoded_size(value: object) -> int:
    """Bytes of `value` as canonical JSON: sorted keys, no whitespace, UTF-8, no NaN.

    This is the encoding used for close-intent digests and outbox records, so the size
    checked here is the size that is stored. Not total: like the encoder it raises
    `TypeError` or `ValueError` for a value that is not JSON (NaN, a lone surrogate, a
    set); check such a value with `find_bound_violations` instead.
    """
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return len(text.encode())


@dataclass(frozen=True)
class BoundViolation:
    """One reason a value is not bounded JSON; `path` is like `$.a.b[3]`."""

    path: str
    reason: str


def find_bound_violations(value: object) -> list[BoundViolation]:
    """Every way `value` breaks the bounds; empty means it may be stored as is.

    Total for any Python object. Only exact `dict`, `list`, `str`, `int`, `float`,
    `bool` and `None` count as JSON: a subclass could run its own code during encoding,
    and a tuple, set or bytes would not survive a JSON round trip unchanged.

    The walk is iterative and never descends below depth MAX_DEPTH + 1, so a 100,000-deep
    list or a cycle cannot exhaust the stack. It also keeps a running lower bound of the
    encoded size and stops as soon as that passes MAX_ENCODED_BYTES: a value within every
    per-node limit can still hold 100**8 nodes, and walking them would never finish. The
    list is therefore exhaustive for values under the size bound and a diagnosis (with
    the size violation last) for larger ones.
    """
    violations: list[BoundViolation] = []
    # Lower bound of the canonical encoding's size: every node costs at least one byte.
    floor = 0
    # (node, path, depth, why its key is out of bounds if it is)
    stack: list[tuple[object, str, int, str | None]] = [(value, "$", 1, None)]
    while stack:
        node, path, depth, key_problem = stack.pop()
        if key_problem is not None:
            violations.append(BoundViolation(path, key_problem))
        if node is None or type(node) is bool:
            floor += 4
        elif type(node) is int:
            floor += 1
            # Compared, never formatted: str() of a huge int is slow or refused outright.
            if not MIN_INT <= node <= MAX_INT:
                violations.append(BoundViolation(path, "integer out of range"))
        elif type(node) is float:
            floor += 1
            if not math.isfinite(node):
                violations.append(BoundViolation(path, "float is not finite"))
        elif type(node) is str:
            floor += len(node) + 2
            reason = _string_problem(node, MAX_STRING_CHARS)
            if reason is not None:
                violations.append(BoundViolation(path, reason))
        elif type(node) is list or type(node) is dict:
            floor += 2 + max(len(node) - 1, 0)
            if depth > MAX_DEPTH:
                violations.append(BoundViolation(path, "nesting too deep"))
                continue
            if len(node) > MAX_COLLECTION_ITEMS:
                violations.append(BoundViolation(path, "too many items"))
                # Unvisited items still cost at least a byte each (a dict entry three).
                unvisited = len(node) - MAX_COLLECTION_ITEMS
                floor += unvisited * (3 if type(node) is dict else 1)
            children: list[tuple[object, str, int, str | None]] = []
            if type(node) is list:
                for index, item in enumerate(itertools.islice(node, MAX_COLLECTION_ITEMS)):
                    children.append((item, f"{path}[{index}]", depth + 1, None))
            elif type(node) is dict:
                entries = itertools.islice(node.items(), MAX_COLLECTION_ITEMS)
                for index, (key, item) in enumerate(entries):
                    floor += (len(key) if type(key) is str else 0) + 3
                    child_path, problem = _key_path(path, key, index)
                    children.append((item, child_path, depth + 1, problem))
            # Reversed so that violations come out in document order.
            stack.extend(reversed(children))
        else:
            floor += 1
            violations.append(BoundViolation(path, f"not a JSON value: {type(node).__name__}"))
        if floor > MAX_ENCODED_BYTES:
            violations.append(BoundViolation("$", "encoded size too large"))
            return violations
    # Only a clean tree is encodable; for anything else the violations already say no.
    if not violations and encoded_size(value) > MAX_ENCODED_BYTES:
        violations.append(BoundViolation("$", "encoded size too large"))
    return violations


def is_bounded_json(value: object) -> bool:
    return not find_bound_violations(value)


def _string_problem(text: str, max_chars: int) -> str | None:
    if len(text) > max_chars:
        return "string too long"
    try:
        text.encode()
    except UnicodeEncodeError:
        # A lone surrogate: legal in a Python str, unencodable as UTF-8 JSON.
        return "string is not valid Unicode"
    return None


def _key_path(parent: str, key: object, index: int) -> tuple[str, str | None]:
    """The child's path and, if the key itself is out of bounds, why.

    A bad key is named by its position, not its text: it may be megabytes long or not a
    string at all, and the path must stay short and printable.
    """
    by_position = f"{parent}[<key {index}>]"
    if type(key) is not str:
        return by_position, "key is not a string"
    if len(key) > MAX_KEY_CHARS:
        return by_position, "key too long"
    if _string_problem(key, MAX_KEY_CHARS) is not None:
        return by_position, "key is not valid Unicode"
    if _PLAIN_KEY.fullmatch(key):
        return f"{parent}.{key}", None
    return f"{parent}[{json.dumps(key)}]", None
