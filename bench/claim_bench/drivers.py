"""The claim/complete cycle over raw SQL and over HTTP, and the loop that drives it.

Each driver runs one worker's cycle: the service's own statements on one asyncpg
connection (`RawSqlCycle`), the textbook queue's (`MinimalCycle`), or the API's
endpoints through httpx (`HttpxCycle`) or lean_http.py (`LeanHttpCycle`). `run_workers`
drives them all at once and takes a CPU snapshot at each mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import asyncpg
import httpx

from activity_core.queue import queries
from claim_bench.cpu import CpuProbe, CpuSnapshot
from claim_bench.errors import BenchError
from claim_bench.plan import LEASE_SECONDS, MAX_ATTEMPTS, RESULT, STORED_RESULT
from claim_bench.records import PhaseLog
from claim_bench.sql import MINIMAL_CLAIM, MINIMAL_COMPLETE
from lean_http import LeanConnection
from ops_contracts import CloseAction, CloseIntent, close_intent_digest

__all__ = [
    "Cycle",
    "HttpxCycle",
    "LeanHttpCycle",
    "MinimalCycle",
    "RawSqlCycle",
    "Worker",
    "drive",
    "http_client",
    "http_cycles",
    "intent_digest",
    "mean_transactions",
    "run_workers",
    "transaction_totals",
]


class Cycle(Protocol):
    async def claim(self) -> list[str]: ...

    async def complete(self, run_id: str) -> None: ...


def intent_digest(worker_id: str) -> str:
    """The digest the service records for a `complete` with RESULT by this worker."""
    return close_intent_digest(
        CloseIntent(
            action=CloseAction.complete,
            worker_id=worker_id,
            result=STORED_RESULT,
            error=None,
            reopen=False,
        )
    )


class RawSqlCycle:
    """queue/claim.py's claim and queue/close.py's complete, without the service around them."""

    def __init__(self, conn: asyncpg.Connection, worker_id: str, limit: int = 1) -> None:
        self._conn = conn
        self._worker_id = worker_id
        self._limit = limit
        self._digest = intent_digest(worker_id)

    async def claim(self) -> list[str]:
        # Autocommit statements, exactly as QueueService runs a claim that arrives alone.
        # The service serves claims that arrive together with one statement
        # (CLAIM_MANY_UNLESS_STALE); the ceiling is the claim-one cycle per
        # connection, so it does not.
        labels: list[str] = []
        args = (self._worker_id, LEASE_SECONDS, self._limit, "none", labels)
        if self._limit == 1:
            one = (self._worker_id, LEASE_SECONDS, "none", labels)
            rows = await self._conn.fetch(queries.CLAIM_ONE_UNLESS_STALE, *one)
        else:
            rows = await self._conn.fetch(queries.CLAIM_UNLESS_STALE, *args)
        if not rows:
            await self._conn.fetch(queries.RECLAIM_STALE, MAX_ATTEMPTS)
            rows = await self._conn.fetch(queries.CLAIM, *args)
        return [str(r["id"]) for r in rows]

    async def complete(self, run_id: str) -> None:
        # The service's close for a leased run queued without a grant: one statement.
        row = await self._conn.fetchrow(
            queries.CLOSE_LEASED_UNGRANTED,
            uuid.UUID(run_id),
            self._worker_id,
            "succeeded",
            STORED_RESULT,
            None,
            self._digest,
            None,  # attempt: not fenced
        )
        if row is None:
            raise BenchError(f"run {run_id} is not claimed by {self._worker_id}")


class MinimalCycle:
    """The textbook queue: one autocommit statement to claim, one to complete."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def claim(self) -> list[str]:
        rows = await self._conn.fetch(MINIMAL_CLAIM)
        return [str(r["id"]) for r in rows]

    async def complete(self, run_id: str) -> None:
        status = await self._conn.execute(MINIMAL_COMPLETE, uuid.UUID(run_id))
        if status != "UPDATE 1":
            raise BenchError(f"minimal complete of {run_id}: {status}")


@dataclass(frozen=True)
class Worker:
    worker_id: str
    token: str


class HttpxCycle:
    """The cycle through httpx, as rein-aharness sends it (costs the bench more CPU)."""

    def __init__(self, client: httpx.AsyncClient, worker: Worker, limit: int = 1) -> None:
        self._client = client
        self._worker = worker
        self._headers = {"Authorization": f"Bearer {worker.token}"}
        self._claim_body = {"worker_id": worker.worker_id, "limit": limit}
        self._complete_body = {"worker_id": worker.worker_id, "result": RESULT}

    async def claim(self) -> list[str]:
        response = await self._client.post(
            "/ops-runs/claim", json=self._claim_body, headers=self._headers
        )
        if response.status_code != 200:
            raise BenchError(f"claim: HTTP {response.status_code} {response.text[:200]}")
        return [str(run["id"]) for run in response.json()["runs"]]

    async def complete(self, run_id: str) -> None:
        response = await self._client.post(
            f"/ops-runs/{run_id}/complete", json=self._complete_body, headers=self._headers
        )
        if response.status_code != 200:
            raise BenchError(f"complete: HTTP {response.status_code} {response.text[:200]}")
        body = response.json()
        if body.get("close_disposition") != "applied" or body.get("state") != "succeeded":
            raise BenchError(f"complete of {run_id}: {body.get('close_disposition')}")


class LeanHttpCycle:
    """The cycle over one keep-alive connection with pre-built requests (lean_http.py)."""

    def __init__(self, base_url: str, worker: Worker, limit: int = 1) -> None:
        url = urllib.parse.urlsplit(base_url)
        assert url.hostname is not None and url.port is not None
        self._conn = LeanConnection(url.hostname, url.port)
        self._headers = {
            "Authorization": f"Bearer {worker.token}",
            "Content-Type": "application/json",
        }
        claim_body = json.dumps({"worker_id": worker.worker_id, "limit": limit}).encode()
        self._claim = self._conn.build("POST", "/ops-runs/claim", self._headers, claim_body)
        self._complete_body = json.dumps({"worker_id": worker.worker_id, "result": RESULT}).encode()

    async def claim(self) -> list[str]:
        response = await self._conn.send(self._claim)
        if response.status != 200:
            raise BenchError(f"claim: HTTP {response.status} {response.body[:200]!r}")
        return [str(run["id"]) for run in json.loads(response.body)["runs"]]

    async def complete(self, run_id: str) -> None:
        request = self._conn.build(
            "POST", f"/ops-runs/{run_id}/complete", self._headers, self._complete_body
        )
        response = await self._conn.send(request)
        if response.status != 200:
            raise BenchError(f"complete: HTTP {response.status} {response.body[:200]!r}")
        body = json.loads(response.body)
        if body.get("close_disposition") != "applied" or body.get("state") != "succeeded":
            raise BenchError(f"complete of {run_id}: {body.get('close_disposition')}")

    def close(self) -> None:
        self._conn.close()


async def drive(cycle: Cycle, log: PhaseLog, stop: asyncio.Event) -> None:
    """Claim, complete what was claimed, repeat until told to stop (finishing the cycle)."""
    while not stop.is_set():
        try:
            t0 = time.perf_counter()
            run_ids = await cycle.claim()
            t1 = time.perf_counter()
            log.claims.append((t1, t1 - t0))
            if not run_ids:
                log.empty_claims += 1
                await asyncio.sleep(0.01)
                continue
            log.record_claimed(run_ids)
        except _FAILURES as exc:
            failed(log, stop, "claim", exc)
            await asyncio.sleep(0.05)
            continue
        for run_id in run_ids:
            try:
                t2 = time.perf_counter()
                await cycle.complete(run_id)
                t3 = time.perf_counter()
                log.closes.append((t3, t3 - t2))
                log.runs_done.append(t3)
            except _FAILURES as exc:
                failed(log, stop, "complete", exc)


_FAILURES = (BenchError, httpx.HTTPError, asyncpg.PostgresError, OSError)  # LeanHttpError: OSError


def failed(log: PhaseLog, stop: asyncio.Event, what: str, exc: Exception) -> None:
    log.errors.append(f"{what}: {type(exc).__name__}: {exc}")
    if len(log.errors) > 50:
        stop.set()


async def run_workers(
    cycles: Sequence[Cycle], log: PhaseLog, marks: Sequence[float], probe: CpuProbe
) -> tuple[float, list[CpuSnapshot]]:
    """Run every cycle concurrently until the last mark (seconds from the start).

    Answers the start time and a CPU snapshot at the start and at every mark.
    """
    stop = asyncio.Event()
    snapshots = [await probe.snapshot()]
    started = time.perf_counter()
    tasks = [asyncio.create_task(drive(c, log, stop)) for c in cycles]
    for mark in marks:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, started + mark - time.perf_counter()))
        snapshots.append(await probe.snapshot())
    stop.set()
    await asyncio.gather(*tasks)
    return started, snapshots


def http_client(base_url: str, workers: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base_url,
        # uvicorn closes a connection idle for 5 s, httpx's default expiry is also 5 s: a
        # request sent on a connection the server is closing fails. Expire ours sooner.
        limits=httpx.Limits(
            max_connections=workers, max_keepalive_connections=workers, keepalive_expiry=2.0
        ),
        timeout=httpx.Timeout(30.0),
        trust_env=False,
    )


@contextlib.asynccontextmanager
async def http_cycles(
    base_url: str, workers: Sequence[Worker], limit: int, client_kind: str
) -> AsyncIterator[list[Cycle]]:
    """One cycle per worker through the chosen load generator, connections closed after."""
    if client_kind == "httpx":
        async with http_client(base_url, len(workers)) as client:
            yield [HttpxCycle(client, w, limit) for w in workers]
        return
    lean = [LeanHttpCycle(base_url, w, limit) for w in workers]
    try:
        yield list(lean)
    finally:
        for cycle in lean:
            cycle.close()


_METRIC = re.compile(r"^(ops_run_(?:claim|close)_seconds_(?:sum|count)) (\S+)$", re.MULTILINE)


async def transaction_totals(client: httpx.AsyncClient) -> dict[str, float]:
    """The API's own claim/close transaction histograms (sum and count) from /metrics."""
    response = await client.get("/metrics")
    return {name: float(value) for name, value in _METRIC.findall(response.text)}


def mean_transactions(
    before: dict[str, float], after: dict[str, float]
) -> tuple[float, float] | None:
    def mean(kind: str) -> float | None:
        count = after.get(f"{kind}_count", 0.0) - before.get(f"{kind}_count", 0.0)
        total = after.get(f"{kind}_sum", 0.0) - before.get(f"{kind}_sum", 0.0)
        return total / count if count else None

    claim, close = mean("ops_run_claim_seconds"), mean("ops_run_close_seconds")
    return None if claim is None or close is None else (claim, close)
