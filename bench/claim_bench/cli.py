"""The command: its options, the server it runs on, the phases in order, the exit status.

Exit status: 0 when no phase saw a double claim or an error, 1 otherwise (or when the
bench failed), 130 on Ctrl-C, 143 on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import tempfile
from functools import partial
from pathlib import Path

import uvloop

import claim_bench
from claim_bench.api_server import api_server, server_log_note
from claim_bench.phases import (
    best_of,
    http_attempt,
    minimal_attempt,
    phase_latency,
    phase_sustain,
    raw_attempt,
)
from claim_bench.plan import FULL, QUICK, Plan
from claim_bench.records import Results
from claim_bench.report import environment, print_profile, print_summary
from claim_bench.scratch import exit_code_of, scratch_database, server_for_bench, sigint_ignored
from claim_bench.seeding import Database

__all__ = ["main", "run"]


async def ceilings(db: Database, plan: Plan, results: Results, which: str) -> None:
    """Phase (a) and its minimal-table reference, once before the HTTP phases and once after
    (`which`), so that a machine that got slower in between shows."""
    label = f"(a) raw SQL, real schema, {plan.raw_connections} connections {which}"
    results.ceiling_runs.append(
        await best_of(label, "cycles/s", lambda: raw_attempt(db, plan, label), results)
    )
    ref = f"(a-ref) raw SQL, minimal queue table, {plan.raw_connections} connections {which}"
    results.minimal_runs.append(
        await best_of(ref, "cycles/s", lambda: minimal_attempt(db, plan, ref), results)
    )


async def run(server_dsn: str, plan: Plan, profile: Path | None) -> int:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)
    results = Results()
    with tempfile.TemporaryDirectory(prefix="claim-bench-") as tmp:
        async with scratch_database(server_dsn) as dsn:
            db = await Database.prepare(dsn)
            try:
                await environment(db)
                await ceilings(db, plan, results, "[1 of 2]")
                fleet = max(plan.http_workers)
                async with api_server(dsn, Path(tmp), fleet, profile, plan.api_workers) as api:
                    print(
                        f"\nactivity-core serve --workers {plan.api_workers}: pid {api.pid} at "
                        f"{api.base_url} (load generator: {plan.client})"
                    )
                    for workers in plan.http_workers:
                        results.http[workers] = await best_of(
                            f"(b) HTTP claim-one + complete, {workers} workers",
                            "cycles/s",
                            partial(http_attempt, db, plan, api, workers, 1, "(b)"),
                            results,
                        )
                    for workers in plan.http_workers:
                        results.batch[workers] = await best_of(
                            f"(c) HTTP claim limit {plan.batch_limit} + completes, "
                            f"{workers} workers",
                            "runs/s",
                            partial(http_attempt, db, plan, api, workers, plan.batch_limit, "(c)"),
                            results,
                        )
                    expected = results.http[plan.sustain_workers].runs_per_s
                    await phase_sustain(db, plan, api, expected, results)
                print(f"  {server_log_note(api.log_path)}")
                if profile is not None:
                    print_profile(profile)
                await ceilings(db, plan, results, "[2 of 2]")
                await phase_sustain(db, plan, None, results.ceiling, results)
                await phase_latency(db, plan, results)
            finally:
                with sigint_ignored():
                    await db.close()
    print_summary(results, plan)
    return 0 if results.double_claims == 0 and results.errors == 0 else 1


def main(argv: list[str] | None = None) -> int:
    description = claim_bench.__doc__
    parser = argparse.ArgumentParser(
        description=description.splitlines()[0] if description else None
    )
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server to create the scratch database on "
        "(default: BENCH_DATABASE_URL, TEST_DATABASE_URL, else an embedded server)",
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument(
        "--client",
        choices=("lean", "httpx"),
        default="lean",
        help="the HTTP load generator: a minimal keep-alive client with pre-built requests "
        "(default; lean_http.py) or httpx, as rein-aharness uses it (costs ~5x the CPU, "
        "taken from the same two cores as the API)",
    )
    parser.add_argument(
        "--api-workers",
        type=int,
        default=1,
        metavar="N",
        help="run the API as `activity-core serve --workers N` (default 1; N processes share "
        "the port, e.g. one per core)",
    )
    parser.add_argument(
        "--profile-api",
        type=Path,
        metavar="FILE",
        help="run the API server under cProfile, write its stats to FILE and print the top "
        "functions (slows the HTTP phases: for finding where time goes, not for figures)",
    )
    args = parser.parse_args(argv)
    plan = dataclasses.replace(
        QUICK if args.quick else FULL, client=args.client, api_workers=args.api_workers
    )

    with contextlib.ExitStack() as stack:
        server_dsn = server_for_bench(args.database_url, stack, "claim-bench-pg-")
        # The loop `serve` runs on, for the bench's asyncpg and HTTP clients alike.
        return exit_code_of(lambda: uvloop.run(run(server_dsn, plan, args.profile_api)))
