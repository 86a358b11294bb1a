"""The one error the bench raises."""

from __future__ import annotations

__all__ = ["BenchError"]


class BenchError(Exception):
    """A phase could not run, or the queue answered something it must not."""
