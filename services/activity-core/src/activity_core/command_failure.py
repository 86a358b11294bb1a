"""How an `activity-core` command fails: one line on stderr, `activity-core: <why>`, and
the exit code the command returns (the CLI's main, the temporal worker, retry-fire)."""

from __future__ import annotations

import sys

__all__ = ["fail", "no_database"]


def fail(problem: object, code: int) -> int:
    print(f"activity-core: {problem}", file=sys.stderr)
    return code


def no_database(exc: BaseException) -> int:
    """The driver's failure (or its translation) before the command could do its work."""
    return fail(f"cannot connect to the database: {type(exc).__name__}: {exc}", 1)
