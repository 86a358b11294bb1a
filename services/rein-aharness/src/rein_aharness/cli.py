"""Command line entry point of the worker (the loop itself lands with its own issue)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(f"rein-aharness: command not available yet: {' '.join(args) or '(none)'}", file=sys.stderr)
    return 2
