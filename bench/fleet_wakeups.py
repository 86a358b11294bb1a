"""What an idle fleet costs the database per opened run (issue 34): the fleet wake-up bench.

    uv run --frozen python bench/fleet_wakeups.py [--database-url URL] [--fleets 10,200,1000]
        [--runs 20] [--apis 1,2]

For each fleet size N and number of API processes P (`activity-core serve`, each its own
process, pool and LISTEN connection, on one scratch database), N workers wait in a
long-poll claim over HTTP (`wait_seconds` 20, one label, split evenly over the APIs), each
worker with its own HTTP client and connection, as a fleet of processes has them. Runs
are then opened one at a time with SQL, each when the last was taken. Printed per row:
- transactions per opened run: pg_stat_database.xact_commit over the opening window,
  divided by the runs opened. It includes the emission's own INSERT. A worker that got a
  run goes off to work and does not come back within the window (a real worker executes
  and closes first); what its return to the long poll costs is its own row, "return",
  measured with nothing open.
- wake → claimed p50/p95: from just before the INSERT to the HTTP answer at the worker.
- the API processes' RSS and CPU while the fleet idles (5 s), and the PostgreSQL
  connections held.
- background transactions per second: a window with nothing opened (the services'
  periodic jobs). The per-run figure subtracts the background of a quiet window measured
  right after each window of runs, at that window's length; "raw" is without it.
The targets (issue 34): at most 3 transactions per opened run at 1,000 idle workers with
one and with two API processes; wake → claimed p95 at 1,000 within 1.5x of the same run's
p95 at 10.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

from claim_bench.api_server import ApiServer, api_server
from claim_bench.cpu import process_tree_cpu
from claim_bench.drivers import Worker
from claim_bench.errors import BenchError
from claim_bench.plan import DEFINITION_ID
from claim_bench.scratch import exit_code_of, scratch_database, server_for_bench
from claim_bench.seeding import Database

LABEL = "fleet-bench"
WAIT_SECONDS = 20
# A backend that went idle sends its counters up to 10 s later (PostgreSQL 15,
# PGSTAT_IDLE_INTERVAL): every reading of xact_commit waits that out first.
STATS_SETTLE_SECONDS = 10.5
IDLE_SECONDS = 5.0

OPEN_RUN = """
INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title, labels,
                      source_type, source_id, triggering_event_id, harness_profile_ref)
VALUES (gen_random_uuid(), $1, $2, 'research/briefs', 'fleet bench',
        jsonb_build_array($3::text), 'rule', 'fleet-bench', $2, 'harness.agent-dev@1.0.0')
RETURNING id
"""


@dataclass
class Fleet:
    """N workers long-polling; each answer with a run is recorded and ends that worker's
    polling until it is sent back (`back_to_work`)."""

    # each worker with its own client and connection, as in a real fleet: one client
    # pooling a thousand connections spends, in httpcore, time per request that grows
    # with the pool, and that time was most of the p95 at 1,000 (issue 34's note)
    workers: list[tuple[httpx.AsyncClient, Worker]]
    received: dict[str, float] = field(default_factory=dict)
    polling: int = 0
    errors: list[str] = field(default_factory=list)
    _busy: dict[str, asyncio.Event] = field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self) -> None:
        for client, worker in self.workers:
            self._busy[worker.worker_id] = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._poll(client, worker)))

    async def _poll(self, client: httpx.AsyncClient, worker: Worker) -> None:
        headers = {"Authorization": f"Bearer {worker.token}"}
        body = {
            "worker_id": worker.worker_id,
            "limit": 1,
            "labels": [LABEL],
            "wait_seconds": WAIT_SECONDS,
        }
        back = self._busy[worker.worker_id]
        while True:
            self.polling += 1
            try:
                response = await client.post("/ops-runs/claim", json=body, headers=headers)
            except httpx.HTTPError as exc:
                self.errors.append(f"{worker.worker_id}: {type(exc).__name__}")
                await asyncio.sleep(0.5)
                continue
            finally:
                self.polling -= 1
            if response.status_code != 200:
                self.errors.append(f"{worker.worker_id}: HTTP {response.status_code}")
                await asyncio.sleep(0.5)
                continue
            runs = response.json()["runs"]
            if runs:
                now = time.perf_counter()
                for run in runs:
                    self.received[run["id"]] = now
                self._arrived.set()
                back.clear()
                await back.wait()  # "working" until sent back to the poll

    async def until_received(self, run_id: str, timeout: float = 15.0) -> float:
        deadline = time.perf_counter() + timeout
        while run_id not in self.received:
            self._arrived.clear()
            left = deadline - time.perf_counter()
            if left <= 0:
                raise BenchError(f"run {run_id} was not handed to any worker in {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)
        return self.received[run_id]

    def back_to_work(self) -> None:
        for event in self._busy.values():
            event.set()

    async def until_polling(self, n: int, timeout: float = 60.0) -> None:
        deadline = time.perf_counter() + timeout
        while self.polling < n:
            if time.perf_counter() > deadline:
                raise BenchError(f"only {self.polling} of {n} workers polling")
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # their own claims answered empty; they wait now

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def committed(conn: asyncpg.Connection) -> tuple[int, float]:
    """xact_commit of the scratch database, and when it was read (perf_counter)."""
    await asyncio.sleep(STATS_SETTLE_SECONDS)
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    value = await conn.fetchval(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    )
    return int(value), time.perf_counter()


# Each reading of the counter is two transactions of our own, counted in a later reading.
READING_TRANSACTIONS = 2


def rss_mib(pid: int) -> float:
    """RSS of a process and its children (`serve` may supervise workers), MiB."""
    total = 0
    pids = [pid]
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            pids += [int(child) for child in listing.read_text().split()]
    for each in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Row:
    fleet: int
    apis: int
    runs: int
    transactions_per_run: float
    raw_per_run: float
    background_per_second: float
    return_per_poll: float
    p50_ms: float
    p95_ms: float
    rss_mib: float
    idle_cpu_percent: float
    connections: int


@contextlib.asynccontextmanager
async def servers(dsn: str, workdir: Path, fleet: int, apis: int) -> AsyncIterator[list[ApiServer]]:
    async with contextlib.AsyncExitStack() as stack:
        started = []
        for n in range(apis):
            own = workdir / f"api-{n}"
            own.mkdir()
            share = fleet // apis + (1 if n < fleet % apis else 0)
            server = api_server(dsn, own, share, None, worker_prefix=f"fleet-api{n}-worker")
            started.append(await stack.enter_async_context(server))
        yield started


async def measure(server_dsn: str, fleet_size: int, apis: int, runs: int) -> Row:
    async with scratch_database(server_dsn) as dsn:
        db = await Database.prepare(dsn)
        workdir = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
        try:
            async with servers(dsn, workdir, fleet_size, apis) as started:
                return await _measure(db, started, fleet_size, apis, runs)
        finally:
            await db.close()
            shutil.rmtree(workdir, ignore_errors=True)


async def _measure(
    db: Database, started: list[ApiServer], fleet_size: int, apis: int, runs: int
) -> Row:
    # a second connection for the return-poll measurement, made while the worker's own
    # long poll holds the first
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=1)
    timeout = httpx.Timeout(WAIT_SECONDS + 15)
    async with contextlib.AsyncExitStack() as stack:
        workers = [
            (
                await stack.enter_async_context(
                    httpx.AsyncClient(
                        base_url=s.base_url, limits=limits, timeout=timeout, trust_env=False
                    )
                ),
                worker,
            )
            for s in started
            for worker in s.workers
        ]
        fleet = Fleet(workers)
        fleet.start()
        try:
            await fleet.until_polling(fleet_size)
            # warm-up: every pool connection prepares its statements (a transaction each)
            for _ in range(3):
                for _ in range(max(1, fleet_size // 2)):
                    await open_and_take(db.conn, fleet)
                fleet.back_to_work()
                await fleet.until_polling(fleet_size)

            # the fleet idles: CPU, RSS, connections, background transactions
            before, before_at = await committed(db.conn)
            cpu_before = [process_tree_cpu(s.pid) or 0.0 for s in started]
            after, after_at = await committed(db.conn)
            cpu_after = [process_tree_cpu(s.pid) or 0.0 for s in started]
            idle_elapsed = after_at - before_at
            background = (after - before - READING_TRANSACTIONS) / idle_elapsed
            idle_cpu = 100 * sum(a - b for a, b in zip(cpu_after, cpu_before, strict=True))
            idle_cpu /= idle_elapsed
            rss = sum(rss_mib(s.pid) for s in started)
            connections = int(
                await db.conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid()"
                )
            )

            # runs opened one at a time; the woken workers go off to work
            per_window = max(1, min(runs, fleet_size))
            latencies: list[float] = []
            transactions = 0
            quiet_transactions = 0
            quiet_seconds = 0.0
            opened = 0
            window_seconds = 0.0
            while opened < runs:
                batch = min(per_window, runs - opened)
                before, before_at = await committed(db.conn)
                for _ in range(batch):
                    latencies.append(await open_and_take(db.conn, fleet))
                after, after_at = await committed(db.conn)
                window_seconds += after_at - before_at
                transactions += after - before - READING_TRANSACTIONS
                # the background right after, nothing opened: what the window would
                # have cost without its runs (the periodic jobs come and go)
                quiet, quiet_at = await committed(db.conn)
                quiet_transactions += quiet - after - READING_TRANSACTIONS
                quiet_seconds += quiet_at - after_at
                opened += batch
                fleet.back_to_work()
                await fleet.until_polling(fleet_size)
            # the background's share of the windows' own time is not the runs'
            raw_per_run = transactions / runs
            per_run = (transactions - quiet_transactions / quiet_seconds * window_seconds) / runs

            # a worker's return to the long poll with nothing open
            returning = min(len(started[0].workers), 50)
            before, before_at = await committed(db.conn)
            for client, worker in workers[:returning]:
                await one_poll(client, worker)
            after, after_at = await committed(db.conn)
            own = after - before - READING_TRANSACTIONS - background * (after_at - before_at)
            return_per_poll = own / returning
        finally:
            await fleet.stop()
        # A worker's transport error (a kept-alive connection the server closed while the
        # worker was off "working") is retried, as the real worker's queue client does;
        # an HTTP error answer is a failure of the API.
        answers = [e for e in fleet.errors if ": HTTP " in e]
        if answers:
            raise BenchError(f"{len(answers)} worker error answers, first: {answers[0]}")
        if fleet.errors:
            print(f"  {len(fleet.errors)} worker transport errors, retried: {fleet.errors[0]}")
    return Row(
        fleet=fleet_size,
        apis=apis,
        runs=runs,
        transactions_per_run=per_run,
        raw_per_run=raw_per_run,
        background_per_second=background,
        return_per_poll=return_per_poll,
        p50_ms=1000 * statistics.median(latencies),
        p95_ms=1000 * percentile(latencies, 0.95),
        rss_mib=rss,
        idle_cpu_percent=idle_cpu,
        connections=connections,
    )


async def open_and_take(conn: asyncpg.Connection, fleet: Fleet) -> float:
    """Open one run and wait until a worker has it: wake → claimed, seconds."""
    key = f"fleet-bench:{uuid.uuid4()}"
    sent = time.perf_counter()
    run_id = await conn.fetchval(OPEN_RUN, DEFINITION_ID, key, LABEL)
    received = await fleet.until_received(str(run_id))
    await asyncio.sleep(0.05)  # every other API's pass for it has run
    return received - sent


async def one_poll(client: httpx.AsyncClient, worker: Worker) -> None:
    """One long poll of 1 s that finds nothing (nothing is open; the fleet keeps polling)."""
    body = {"worker_id": worker.worker_id, "limit": 1, "labels": [LABEL], "wait_seconds": 1}
    headers = {"Authorization": f"Bearer {worker.token}"}
    response = await client.post("/ops-runs/claim", json=body, headers=headers)
    if response.status_code != 200 or response.json()["runs"]:
        raise BenchError(f"return poll: HTTP {response.status_code} {response.text[:200]}")


def report(rows: list[Row]) -> int:
    print()
    print(
        "| idle workers | APIs | runs | tx per opened run | raw | return poll tx | background tx/s "
        "| wake→claimed p50 | p95 | API RSS | idle CPU | PG connections |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r.fleet:,} | {r.apis} | {r.runs} | {r.transactions_per_run:.2f} "
            f"| {r.raw_per_run:.2f} "
            f"| {r.return_per_poll:.2f} | {r.background_per_second:.2f} | {r.p50_ms:.1f} ms "
            f"| {r.p95_ms:.1f} ms | {r.rss_mib:.0f} MiB | {r.idle_cpu_percent:.1f}% "
            f"| {r.connections} |"
        )
    failed = 0
    print()
    by_key = {(r.fleet, r.apis): r for r in rows}
    largest = max(r.fleet for r in rows)
    smallest = min(r.fleet for r in rows)
    for apis in sorted({r.apis for r in rows}):
        top = by_key.get((largest, apis))
        if top is None:
            continue
        ok = top.transactions_per_run <= 3
        failed += not ok
        print(
            f"{'PASS' if ok else 'FAIL'} {largest:,} idle workers, {apis} API: "
            f"{top.transactions_per_run:.2f} transactions per opened run (target ≤ 3)"
        )
        base = by_key.get((smallest, apis))
        if base is not None and base is not top:
            ratio = top.p95_ms / base.p95_ms if base.p95_ms else float("inf")
            ok = ratio <= 1.5
            failed += not ok
            print(
                f"{'PASS' if ok else 'FAIL'} {apis} API: wake→claimed p95 at {largest:,} is "
                f"{ratio:.2f}x the p95 at {smallest:,} in this run (target ≤ 1.5x)"
            )
    return 1 if failed else 0


async def run(server_dsn: str, fleets: list[int], apis: list[int], runs: int) -> int:
    rows = []
    for p in apis:
        for n in fleets:
            print(f"· {n:,} idle workers on {p} API process(es) ...", flush=True)
            row = await measure(server_dsn, n, p, runs)
            print(
                f"  {row.transactions_per_run:.2f} tx per opened run, p95 {row.p95_ms:.1f} ms",
                flush=True,
            )
            rows.append(row)
    return report(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server to create scratch databases on "
        "(default: BENCH_DATABASE_URL, TEST_DATABASE_URL, else an embedded server)",
    )
    parser.add_argument("--fleets", default="10,200,1000", help="idle fleet sizes (comma list)")
    parser.add_argument("--apis", default="1,2", help="API process counts (comma list)")
    parser.add_argument("--runs", type=int, default=20, help="runs opened per row (default 20)")
    args = parser.parse_args(argv)
    try:
        fleets = [int(n) for n in args.fleets.split(",")]
        apis = [int(n) for n in args.apis.split(",")]
    except ValueError:
        parser.error("--fleets and --apis take comma-separated whole numbers")
    if min(fleets) < 1 or min(apis) < 1 or args.runs < 1 or max(apis) > min(fleets):
        parser.error("fleets, apis and runs must be positive, and every fleet at least apis")
    print(f"fleet wake-up bench: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print("command:", " ".join(["bench/fleet_wakeups.py", *(argv or sys.argv[1:])]))
    with contextlib.ExitStack() as stack:
        server_dsn = server_for_bench(args.database_url, stack, "fleet-bench-pg-")
        return exit_code_of(lambda: asyncio.run(run(server_dsn, fleets, apis, args.runs)))


if __name__ == "__main__":
    sys.exit(main())
