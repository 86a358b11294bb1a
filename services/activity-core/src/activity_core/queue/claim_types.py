"""What claims share to be served by one statement, and what each claimer brings."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ClaimKey", "Claimer"]


class ClaimKey(NamedTuple):
    """What claims must share to be served by one statement."""

    labels_mode: str  # 'none' when the claim names no labels, else 'any' | 'all'
    labels: tuple[str, ...]
    limit: int


class Claimer(NamedTuple):
    """What each claimer brings to a shared statement."""

    worker_id: str
    lease_seconds: int
