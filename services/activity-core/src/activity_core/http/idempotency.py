"""The `Idempotency-Key` header, as each action that takes one declares it."""

from __future__ import annotations

from typing import Any

from fastapi import Header

from ops_contracts import IDEMPOTENCY_KEY_PATTERN

__all__ = ["idempotency_key_header"]


def idempotency_key_header(meaning: str) -> Any:
    """The header's declaration: what a key means to this action (`meaning`), then the
    alphabet every key is checked against."""
    return Header(
        alias="Idempotency-Key",
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description=f"{meaning} 1-128 of letters, digits and . _ : @ + = -",
    )
