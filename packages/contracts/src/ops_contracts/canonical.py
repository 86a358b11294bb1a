"""The one canonical JSON encoding and domain-separated digest of the system.

Grant ids, acceptance-policy ids and close-intent digests are computed by two
independently deployed processes (the worker and activity-core) and compared
byte for byte. They agree only if both encode values identically, so every
digest in the system goes through these two functions and nothing else.

The encoding is ``json.dumps`` with sorted keys, no insignificant whitespace,
raw UTF-8 (``ensure_ascii=False``) and no NaN/Infinity, which JSON cannot
represent and which would make "the same" value encode differently across
parsers. Object keys must be strings: ``json.dumps`` would silently turn
``{1: "a"}`` into ``{"1": "a"}`` and so give two different values one encoding.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["canonical_json", "digest_hex", "digest_hex_of_encoded"]


def canonical_json(value: object) -> bytes:
    """Encode a JSON value canonically as UTF-8 bytes.

    Raises ``ValueError`` for NaN/Infinity, non-JSON types, non-string object
    keys, unpaired surrogates, circular references and nesting too deep to
    encode.
    """
    try:
        text = json.dumps(
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except TypeError as exc:
        raise ValueError(f"not canonical JSON: {exc}") from exc
    except RecursionError as exc:
        raise ValueError("not canonical JSON: nested too deeply") from exc
    _reject_non_string_keys(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A lone surrogate (e.g. from a JSON "\ud800" escape) has no UTF-8 form.
        raise ValueError("not canonical JSON: unpaired surrogate in a string") from exc


def digest_hex(value: object, *, domain: str) -> str:
    """SHA-256 (hex) of ``domain``, a newline, then ``canonical_json(value)``.

    The domain tag keeps digests of different kinds of value apart: a grant and
    a close intent that happened to share a canonical encoding still get
    different digests. A domain may not contain a newline, so the boundary
    between tag and payload is unambiguous.
    """
    return digest_hex_of_encoded(canonical_json(value), domain=domain)


def digest_hex_of_encoded(encoded: bytes, *, domain: str) -> str:
    """``digest_hex`` of a value whose ``canonical_json`` the caller already holds."""
    if not domain or "\n" in domain:
        raise ValueError("digest domain must be a non-empty single line")
    return hashlib.sha256(domain.encode("utf-8") + b"\n" + encoded).hexdigest()


# A tuple, not `dict | list | tuple`: isinstance with a union is twice as slow.
_CONTAINERS = (dict, list, tuple)


def _reject_non_string_keys(value: object) -> None:
    # Runs only after json.dumps succeeded, so the structure is acyclic and made of JSON
    # types; iterative so depth never costs Python stack. It runs on every jsonb value
    # the service writes, so only containers go on the stack, never their scalars.
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ValueError(f"not canonical JSON: object key {key!r} is not a string")
                if isinstance(child, _CONTAINERS):
                    pending.append(child)
        elif isinstance(item, _CONTAINERS):
            for child in item:
                if isinstance(child, _CONTAINERS):
                    pending.append(child)
