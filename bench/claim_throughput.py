"""Claim-queue throughput benchmark: the command (phases and targets in claim_bench/plan.py).

    uv run python bench/claim_throughput.py [--database-url URL] [--quick]
        [--client lean|httpx] [--api-workers N] [--profile-api FILE]

What it measures and how: the package bench/claim_bench/ (its __init__.py says what each
phase is and which module does what). This file only runs it, with bench/ on sys.path as
Python puts a script's folder there.
"""

from __future__ import annotations

import sys

from claim_bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
