"""Validators for the bounded scalar and list kinds the evidence allowlists are made of.

Each validator returns its input unchanged when it is valid and None otherwise. None of
them repairs a value (no stripping, no lowercasing): evidence is compared across
services (a repeated close must match exactly), so a value is either the sender's own
or absent. That also makes every validator idempotent by construction.

Only exact builtin types are accepted. JSON decoders produce nothing else, and a
subclass could run its own `__eq__`, `__iter__` or `__str__` while it is inspected, which
is what would let a caller make these functions raise.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable

from ops_evidence.bounds import (
    MAX_COLLECTION_ITEMS,
    MAX_IDENTIFIER_CHARS,
    MAX_INT,
    JsonValue,
    encoded_size,
)

__all__ = [
    "MAX_LIST_ENCODED_BYTES",
    "MAX_PATH_CHARS",
    "MAX_TARGET_REPO_CHARS",
    "accepted_commit_list",
    "accepted_path_list",
    "bounded_list",
    "complete_list",
    "git_object_id",
    "git_object_id_list",
    "identifier",
    "identifier_list",
    "non_negative_int",
    "non_negative_number",
    "one_of",
    "repo_path",
    "repo_path_list",
    "target_repo",
]

MAX_PATH_CHARS = 1024
MAX_TARGET_REPO_CHARS = 256
# Encoded bytes (brackets and commas included) one list may take. MAX_COLLECTION_ITEMS
# worst-case identifiers or paths would be 50-400 KiB; with this budget the six lists of
# a result, together with every scalar field at its own maximum, stay under the 64 KiB
# outbox bound (the arithmetic is in normalize.py and checked by the tests). A hundred
# realistic paths or refs (up to ~80 bytes each) still fit.
MAX_LIST_ENCODED_BYTES = 8192

# Printable ASCII without space. Identifiers are machine tokens (UUIDs, `name@1.2.3`,
# `sha256:…`); keeping them ASCII rules out invisible or bidirectional characters on
# operator pages and bounds their encoding at two bytes a character (`"` and `\`).
_IDENTIFIER = re.compile(r"[\x21-\x7e]+")
_GIT_OBJECT_ID = re.compile(r"[0-9a-f]{7,64}")
_TARGET_REPO = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")
# Control, format (zero-width, bidi overrides) and surrogate code points: invisible or
# unencodable, never part of a path worth showing or storing.
_FORBIDDEN_PATH_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})


def identifier(value: object) -> str | None:
    """1..MAX_IDENTIFIER_CHARS printable ASCII characters, no whitespace anywhere."""
    if type(value) is str and len(value) <= MAX_IDENTIFIER_CHARS and _IDENTIFIER.fullmatch(value):
        return value
    return None


def git_object_id(value: object) -> str | None:
    """An abbreviated or full SHA-1/SHA-256 object name, lowercase as git prints it.

    Uppercase is refused rather than lowercased so that the stored value is always the
    one the worker sent.
    """
    if type(value) is str and len(value) <= 64 and _GIT_OBJECT_ID.fullmatch(value):
        return value
    return None


def repo_path(value: object) -> str | None:
    """A canonical repository-relative POSIX file path.

    No leading `/`, no `\\`, no empty, `.` or `..` segment (so no trailing `/` either)
    and no `.git` segment in any letter case: case-insensitive filesystems resolve
    `.GIT` to the repository's own metadata.
    """
    if type(value) is not str or not 1 <= len(value) <= MAX_PATH_CHARS:
        return None
    if value.startswith("/") or "\\" in value:
        return None
    if any(unicodedata.category(char) in _FORBIDDEN_PATH_CATEGORIES for char in value):
        return None
    for segment in value.split("/"):
        if segment in ("", ".", "..") or segment.casefold() == ".git":
            return None
    return value


def target_repo(value: object) -> str | None:
    """`owner/name`-like: ASCII name segments joined by `/`, none of them `.` or `..`.

    The pattern alone admits `..`; it is refused because the value is joined into
    Forgejo URLs on operator pages.
    """
    if type(value) is not str or len(value) > MAX_TARGET_REPO_CHARS:
        return None
    if not _TARGET_REPO.fullmatch(value):
        return None
    if any(segment in (".", "..") for segment in value.split("/")):
        return None
    return value


def non_negative_int(value: object) -> int | None:
    """0..MAX_INT; a bool is not a count even though Python says it is an int."""
    if type(value) is int and 0 <= value <= MAX_INT:
        return value
    return None


def non_negative_number(value: object) -> int | float | None:
    """A non-negative int in range or a finite non-negative float, kept as sent."""
    if type(value) is float:
        return value if math.isfinite(value) and value >= 0 else None
    return non_negative_int(value)


def one_of(value: object, choices: frozenset[str]) -> str | None:
    if type(value) is str and value in choices:
        return value
    return None


def bounded_list(value: object, item: Callable[[object], str | None]) -> list[JsonValue] | None:
    """The valid items of a list, in order, within the item and byte budgets.

    Invalid items are dropped; the result is the longest run of valid items that fits
    MAX_COLLECTION_ITEMS and MAX_LIST_ENCODED_BYTES, so normalizing it again keeps all of
    it. An empty list stays an empty list, but a non-empty list with no valid item is
    absent: storing `[]` would claim "none" where the sender claimed something invalid.
    """
    if type(value) is not list:
        return None
    kept: list[JsonValue] = []
    size = 2
    for raw in value:
        cleaned = item(raw)
        if cleaned is None:
            continue
        cost = encoded_size(cleaned) + (1 if kept else 0)
        if len(kept) == MAX_COLLECTION_ITEMS or size + cost > MAX_LIST_ENCODED_BYTES:
            break
        kept.append(cleaned)
        size += cost
    if value and not kept:
        return None
    return kept


def complete_list(value: object, item: Callable[[object], str | None]) -> list[JsonValue] | None:
    """The whole list when every item is valid and it fits the budgets, else absent.

    For acceptance evidence (accepted commits and paths) a partial list would hide exactly
    the item a reviewer must see: one `.git/config` among valid paths must make the evidence
    absent (and a granted completion then fails closed), never silently vanish.
    """
    kept = bounded_list(value, item)
    if kept is None or type(value) is not list or len(kept) != len(value):
        return None
    return kept


def accepted_commit_list(value: object) -> list[JsonValue] | None:
    return complete_list(value, git_object_id)


def accepted_path_list(value: object) -> list[JsonValue] | None:
    return complete_list(value, repo_path)


def identifier_list(value: object) -> list[JsonValue] | None:
    return bounded_list(value, identifier)


def git_object_id_list(value: object) -> list[JsonValue] | None:
    return bounded_list(value, git_object_id)


def repo_path_list(value: object) -> list[JsonValue] | None:
    return bounded_list(value, repo_path)
