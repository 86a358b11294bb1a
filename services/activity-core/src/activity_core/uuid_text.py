"""A UUID named in text that may be anything else: a path segment, an automation reference."""

from __future__ import annotations

import uuid

__all__ = ["uuid_or_none"]


def uuid_or_none(value: str) -> uuid.UUID | None:
    """The UUID `value` spells, or None when it spells none (a slug, a typo)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        return None
