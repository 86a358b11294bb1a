"""The lettered phases: each attempt seeds its table, drives its workers and checks the result.

A throughput phase is measured again while other processes took a real share of the CPU
(`best_of`; the sustained run `phase_sustain`); every attempt counts for double claims
and errors.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg

from activity_core.queue import queries
from claim_bench.api_server import ApiServer
from claim_bench.cpu import CpuProbe, CpuSnapshot
from claim_bench.drivers import (
    Cycle,
    MinimalCycle,
    RawSqlCycle,
    http_client,
    http_cycles,
    mean_transactions,
    run_workers,
    transaction_totals,
)
from claim_bench.errors import BenchError
from claim_bench.plan import (
    LATENCY_ROUNDS,
    LATENCY_WARMUP,
    LEASE_SECONDS,
    MAX_TRIES,
    NOISE_LIMIT,
    SUSTAIN_TRIES,
    Plan,
)
from claim_bench.records import (
    Measured,
    PhaseLog,
    Results,
    Sustained,
    Throughput,
    ms,
    percentile,
    summarize,
)
from claim_bench.report import print_attempt
from claim_bench.seeding import Database, connect

__all__ = [
    "best_of",
    "claim_latency",
    "explain_claim",
    "http_attempt",
    "minimal_attempt",
    "phase_latency",
    "phase_sustain",
    "raw_attempt",
]


async def best_of(
    label: str, unit: str, attempt: Callable[[], Awaitable[Measured]], results: Results
) -> Throughput:
    """Measure; while other processes took a real share of the CPU, measure again.

    The best attempt stands for the phase (the machine is shared); every attempt counts
    for double claims and errors.
    """
    print(f"\n{label}")
    tries: list[Throughput] = []
    for n in range(1, MAX_TRIES + 1):
        measured = await attempt()
        print_attempt(measured, unit)
        tries.append(results.add(measured.result))
        rest = measured.result.cpu.rest
        if not measured.result.cpu.noisy:
            break
        if n < MAX_TRIES:
            print(f"  ~ other processes used {rest:.2f} cores (> {NOISE_LIMIT}); measuring again")
    best = max(tries, key=lambda t: t.runs_per_s)
    if len(tries) > 1:
        print(f"  = best of {len(tries)}: {best.runs_per_s:,.0f} {unit}")
    return best


def window_result(
    label: str, log: PhaseLog, plan: Plan, started: float, snaps: list[CpuSnapshot]
) -> Throughput:
    start, end = started + plan.warmup, started + plan.warmup + plan.measure
    return summarize(label, log, start, end, CpuProbe.use(snaps[1], snaps[2]))


async def raw_attempt(db: Database, plan: Plan, label: str) -> Measured:
    await db.reset(plan.backlog, chunk=plan.insert_chunk)
    conns = [await connect(db.dsn) for _ in range(plan.raw_connections)]
    log = PhaseLog(label)
    try:
        cycles = [RawSqlCycle(c, f"bench-raw-{i:02d}") for i, c in enumerate(conns)]
        marks = (plan.warmup, plan.warmup + plan.measure)
        started, snaps = await run_workers(cycles, log, marks, CpuProbe(db.conn, db.name, None))
    finally:
        for c in conns:
            await c.close()
    await db.check_runs(log)
    return Measured(window_result(label, log, plan, started, snaps), log)


async def minimal_attempt(db: Database, plan: Plan, label: str) -> Measured:
    await db.reset_minimal(plan.backlog * 3)
    conns = [await connect(db.dsn) for _ in range(plan.raw_connections)]
    log = PhaseLog(label)
    try:
        marks = (plan.warmup, plan.warmup + plan.measure)
        probe = CpuProbe(db.conn, db.name, None)
        started, snaps = await run_workers([MinimalCycle(c) for c in conns], log, marks, probe)
    finally:
        for c in conns:
            await c.close()
    return Measured(window_result(label, log, plan, started, snaps), log)


async def http_attempt(
    db: Database, plan: Plan, api: ApiServer, workers: int, limit: int, label: str
) -> Measured:
    await db.reset(plan.backlog, chunk=plan.insert_chunk)
    log = PhaseLog(label)
    async with (
        http_client(api.base_url, 1) as client,
        http_cycles(api.base_url, api.workers[:workers], limit, plan.client) as cycles,
    ):
        before = await transaction_totals(client)
        marks = (plan.warmup, plan.warmup + plan.measure)
        probe = CpuProbe(db.conn, db.name, api.pid)
        started, snaps = await run_workers(cycles, log, marks, probe)
        after = await transaction_totals(client)
    await db.check_runs(log)
    result = window_result(label, log, plan, started, snaps)
    return Measured(result, log, mean_transactions(before, after))


@contextlib.asynccontextmanager
async def sustain_cycles(
    db: Database, plan: Plan, api: ApiServer | None
) -> AsyncIterator[list[Cycle]]:
    """HTTP workers when there is an API server, else raw SQL connections."""
    if api is not None:
        workers = api.workers[: plan.sustain_workers]
        async with http_cycles(api.base_url, workers, 1, plan.client) as cycles:
            yield cycles
        return
    conns = [await connect(db.dsn) for _ in range(plan.raw_connections)]
    try:
        yield [RawSqlCycle(c, f"bench-raw-{i:02d}") for i, c in enumerate(conns)]
    finally:
        for c in conns:
            await c.close()


async def sustain_attempt(
    db: Database, plan: Plan, api: ApiServer | None, rows: int, results: Results
) -> Sustained:
    label = "(e) sustained " + ("HTTP" if api else "raw SQL")
    await db.reset(rows, chunk=plan.insert_chunk)
    autovacuum = await db.conn.fetchval("SHOW autovacuum")
    before = await db.table_stats()
    plan_before = await explain_claim(db.conn)
    log = PhaseLog(label)
    windows = round(plan.sustain / plan.window)
    marks = [plan.window * (i + 1) for i in range(windows)]
    async with sustain_cycles(db, plan, api) as cycles:
        probe = CpuProbe(db.conn, db.name, api.pid if api else None)
        started, snaps = await run_workers(cycles, log, marks, probe)
    await db.check_runs(log)
    after = await db.table_stats()
    plan_after = await explain_claim(db.conn)
    whole = summarize(
        label, log, started, started + plan.sustain, CpuProbe.use(snaps[0], snaps[-1])
    )
    print_attempt(Measured(whole, log), "cycles/s")
    results.add(whole)
    rates = [
        log.rate(started + i * plan.window, started + (i + 1) * plan.window) for i in range(windows)
    ]
    uses = [CpuProbe.use(snaps[i], snaps[i + 1]) for i in range(windows)]
    noise = [u.rest for u in uses]
    print(f"  cycles/s per {plan.window:.0f} s window: " + " → ".join(f"{r:,.0f}" for r in rates))
    print(
        "  other processes' cores per window: "
        + " → ".join("?" if n is None else f"{n:.2f}" for n in noise)
    )
    # Bloat shows as more CPU per run on the claim path; other tenants barely move this.
    for name, values in (
        ("postgres", [u.postgres for u in uses]),
        ("api", [u.api for u in uses]),
    ):
        if all(v is not None for v in values) and all(rates):
            per_run = (1000 * (v or 0.0) / r for v, r in zip(values, rates, strict=True))
            print(
                f"  {name} CPU per run per window: "
                + " → ".join(f"{x:.2f}" for x in per_run)
                + " ms"
            )
    first, last = rates[0], rates[-1]
    print(
        f"  first {plan.window:.0f} s {first:,.0f} cycles/s · last {plan.window:.0f} s "
        f"{last:,.0f} cycles/s · last/first {last / first if first else float('nan'):.0%}"
    )
    print(
        f"  autovacuum={autovacuum} · ops_runs dead tuples {before['n_dead_tup']:,} → "
        f"{after['n_dead_tup']:,} · HOT updates "
        f"{after['n_tup_hot_upd'] - before['n_tup_hot_upd']:,}"
        f" of {after['n_tup_upd'] - before['n_tup_upd']:,} · autovacuum runs "
        f"{after['autovacuum_count'] - before['autovacuum_count']}"
        # between the two readings only activity-core's own upkeep runs VACUUM
        f" · activity-core VACUUMs {after['vacuum_count'] - before['vacuum_count']}"
    )
    print(
        f"  ops_runs size {before['total_bytes'] / 2**20:,.0f} → "
        f"{after['total_bytes'] / 2**20:,.0f} MiB (heap {before['heap_bytes'] / 2**20:,.0f} → "
        f"{after['heap_bytes'] / 2**20:,.0f} MiB) · claim index "
        f"{before['claim_index_bytes'] / 2**20:,.1f} → "
        f"{after['claim_index_bytes'] / 2**20:,.1f} MiB"
    )
    # What the claim itself touches: dead index entries left by claimed rows pile up at the
    # head of the claim-order index until a VACUUM removes them.
    await db.conn.execute("VACUUM ops_runs")
    print(f"  claim plan before the run: {plan_before}")
    print(f"  claim plan after the run:  {plan_after}")
    print(f"  claim plan after VACUUM:   {await explain_claim(db.conn)}")
    edge_noise = max(n or 0.0 for n in (noise[0], noise[-1]))
    return Sustained(first, last, edge_noise)


async def phase_sustain(
    db: Database, plan: Plan, api: ApiServer | None, expected_rate: float, results: Results
) -> None:
    """(e): the HTTP run is the figure; the raw SQL run churns ~10x the rows per second,
    so it shows what dead tuples do to the claim path when the API is not the bottleneck."""
    kind = "HTTP" if api else "raw SQL"
    clients = f"{plan.sustain_workers} workers" if api else f"{plan.raw_connections} connections"
    print(f"\n(e) sustained {kind}, {clients}, {plan.sustain:.0f} s")
    # Enough backlog for the whole run with headroom, so the queue never runs dry.
    rows = max(plan.backlog, int(expected_rate * plan.sustain * 1.6) + 10_000)
    tries: list[Sustained] = []
    for n in range(1, SUSTAIN_TRIES + 1):
        tries.append(await sustain_attempt(db, plan, api, rows, results))
        if tries[-1].noise <= NOISE_LIMIT:
            break
        if n < SUSTAIN_TRIES:
            print(
                f"  ~ other processes used {tries[-1].noise:.2f} cores in the first or last "
                "window; running again"
            )
    chosen = min(tries, key=lambda t: t.noise)
    if len(tries) > 1:
        print("  = the attempt with the quietest first and last windows stands")
    results.sustained[kind] = chosen


async def explain_claim(conn: asyncpg.Connection) -> str:
    """The claim's plan at this size: indexes used, buffers touched, execution time."""
    tr = conn.transaction()
    await tr.start()
    try:
        raw = await conn.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries.CLAIM_ONE_UNLESS_STALE,
            "bench-explain",
            LEASE_SECONDS,
            "none",
            [],
        )
    finally:
        await tr.rollback()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    scans: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if "Index Name" in node:
            scans.append(f"{node['Node Type']} on {node['Index Name']}")
        elif node.get("Node Type") == "Seq Scan":
            scans.append(f"Seq Scan on {node.get('Relation Name')}")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    top = plan["Plan"]
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return (
        f"{'; '.join(scans) or 'no scan found'} · {buffers} buffers · "
        f"execution {plan['Execution Time']:.3f} ms"
    )


async def claim_latency(dsn: str, samples: int) -> list[float]:
    """The service's claim of one run (CLAIM_ONE_UNLESS_STALE; nothing is stale here) timed on one
    connection inside a transaction that is then rolled back (BEGIN and ROLLBACK untimed)."""
    conn = await connect(dsn)
    try:
        timings: list[float] = []
        for i in range(LATENCY_WARMUP + samples):
            tr = conn.transaction()
            await tr.start()
            t0 = time.perf_counter()
            rows = await conn.fetch(
                queries.CLAIM_ONE_UNLESS_STALE, "bench-latency", LEASE_SECONDS, "none", []
            )
            t1 = time.perf_counter()
            await tr.rollback()
            if len(rows) != 1:
                raise BenchError(f"latency claim returned {len(rows)} runs")
            if i >= LATENCY_WARMUP:
                timings.append(t1 - t0)
        return timings
    finally:
        await conn.close()


async def latency_rounds(db: Database, plan: Plan, rows: int) -> float:
    """Claim p50 at this size: the lowest of a few rounds' p50s, as noise only adds."""
    p50s: list[float] = []
    notes: list[str] = []
    for _ in range(LATENCY_ROUNDS):
        timings = await claim_latency(db.dsn, plan.latency_samples)
        p50s.append(percentile(timings, 0.5))
        notes.append(f"{ms(p50s[-1])} (p99 {ms(percentile(timings, 0.99))})")
    print(f"  {rows:,} open rows: claim p50 per round {', '.join(notes)}")
    print(f"    plan: {await explain_claim(db.conn)}")
    return min(p50s)


async def phase_latency(db: Database, plan: Plan, results: Results) -> None:
    print(
        f"\n(d) claim latency vs table size (1 connection; {LATENCY_ROUNDS} rounds of "
        f"{plan.latency_samples:,} claims, each rolled back)"
    )
    await db.reset(plan.small_rows, chunk=plan.insert_chunk)
    results.latency_small = await latency_rounds(db, plan, plan.small_rows)
    await db.add_runs(plan.big_rows - plan.small_rows, chunk=plan.insert_chunk)
    results.latency_big = await latency_rounds(db, plan, plan.big_rows)
    print(
        f"  p50 {ms(results.latency_small)} → {ms(results.latency_big)}: "
        f"ratio {results.latency_big / results.latency_small:.2f}x"
    )
    await db.conn.execute(
        "TRUNCATE ops_runs, ops_run_keys, task_spawn_log, ops_run_changes, ops_run_publications"
    )
