"""`ops-demo`: placeholder until the demo lands."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("ops-demo: not available yet", file=sys.stderr)
    return 2
