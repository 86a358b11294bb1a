"""A claim: lease open runs to a worker, in claim order, never one that is already leased.

The common claim is one autocommit statement (queries.CLAIM_ONE_UNLESS_STALE for one run,
CLAIM_UNLESS_STALE for a batch, CLAIM_MANY_UNLESS_STALE for claims that arrived together,
queue/coalesce.py) that leases
only when no claim is stale. When it comes back empty (nothing open, or a stale claim
seen), stale claims are reopened in bounded batches (RECLAIM_STALE) and the claim runs
again (CLAIM) in a fresh snapshot that sees the reopened rows. So a busy queue claims in
one round trip, and stale claims are always reopened before a claim selects.

Once sent, a leasing statement is never repeated here: a claim repeated after it
committed would lease a second set of runs to a worker that never learns of the first
(db/unavailable.py, Unit.STATEMENTS). A claim with a wait that found nothing waits in
the process's claim dispatcher (dispatch.py), woken through OpenRunSignal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.db.unavailable import Unit, run_unit
from activity_core.queue import queries
from activity_core.queue.claim_types import Claimer, ClaimKey
from activity_core.queue.coalesce import Coalescer
from activity_core.queue.dispatch import Dispatcher
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.projection import project
from activity_core.queue.sightings import ClaimSightings
from activity_core.queue.wakeups import OpenRunSignal
from ops_contracts import LabelsMode, RunState

__all__ = [
    "MAX_ROWS_PER_CLAIM_STATEMENT",
    "ClaimKey",
    "ClaimSpec",
    "Claimer",
    "Claims",
    "record_ended_leases",
]

log = logging.getLogger("activity_core.queue")

# A coalesced claim leases at most this many rows (claimers x limit), so one statement
# stays short however large the limits are.
MAX_ROWS_PER_CLAIM_STATEMENT = 500


@dataclass(frozen=True)
class ClaimSpec:
    worker_id: str
    labels: Sequence[str] | None
    labels_mode: LabelsMode
    limit: int
    lease_seconds: int
    wait_seconds: int


def _key(spec: ClaimSpec) -> ClaimKey:
    labels = tuple(spec.labels or ())
    return ClaimKey("none" if not labels else spec.labels_mode.value, labels, spec.limit)


def record_ended_leases(
    metrics: QueueMetrics, rows: Sequence[asyncpg.Record], *, trigger: str
) -> None:
    """Count and log the stale leases a statement ended (a claim's reclaim, or
    expire-leases): each run is open again for its next attempt, or expired at the
    ceiling."""
    for row in rows:
        outcome = "expired" if row["state"] == RunState.expired else "reopened"
        metrics.leases_ended.labels(outcome=outcome).inc()
        log.info(
            "stale lease %s",
            outcome,
            extra={"run_id": str(row["id"]), "worker_id": row["claim_owner"], "trigger": trigger},
        )


class Claims:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        max_attempts: int,
        metrics: QueueMetrics,
        signal: OpenRunSignal | None,
        sightings: ClaimSightings | None,
        coalesce_max: int,
    ) -> None:
        self._pool = pool
        self._max_attempts = max_attempts
        self._metrics = metrics
        self._signal = signal
        self._sightings = sightings
        self._coalesce_max = coalesce_max
        self._together: Coalescer[ClaimKey, Claimer, list[asyncpg.Record]] = Coalescer(
            self._lease_together, max_items=self._claimers_per_statement
        )
        self._polling_together: Coalescer[ClaimKey, Claimer, tuple[list[asyncpg.Record], bool]] = (
            Coalescer(self._lease_for_pollers, max_items=self._claimers_per_statement)
        )
        self._releases: set[asyncio.Future[None]] = set()
        self._dispatcher = Dispatcher(
            lease_for_waiters=self._lease_for_waiters,
            reclaim=self._reclaim,
            release=self._release,
            claimers_per_statement=self._claimers_per_statement,
            listening=lambda: signal is not None and signal.listening,
        )
        if signal is not None:
            signal.subscribe(self._dispatcher.wake)

    @property
    def dispatcher(self) -> Dispatcher:
        return self._dispatcher

    def drain(self) -> None:
        self._dispatcher.close()

    async def claim(self, spec: ClaimSpec) -> list[dict[str, Any]]:
        if self._sightings is not None:
            # in memory only; written to ops_workers off the claim path (sightings.py)
            self._sightings.record(spec.worker_id, spec.labels, spec.labels_mode.value, spec.limit)
        waits = self._signal is not None and spec.wait_seconds > 0 and not self._signal.draining
        # Note the wake-ups seen before looking, so a run opened between an empty claim
        # and the registration is still looked for (dispatch.py).
        seen = self._dispatcher.generation
        key = _key(spec)
        if waits and self._dispatcher.knows_nothing_open(key):
            # an idle fleet's return to the poll: a statement just found this key's queue
            # empty and nothing it may match opened since (dispatch.py)
            self._metrics.claims_waiting_without_statement.inc()
            own = []
        else:
            sent_at = asyncio.get_running_loop().time()
            polling = self._claim_once(spec, polling=waits)
            own = await self._leased_unless_gone(spec.worker_id, polling)
            if not own and waits:
                self._dispatcher.found_empty(key, seen=seen, at=sent_at)
        if own or not waits:
            return self._delivered(spec, own)
        waiter = self._dispatcher.register(
            key, Claimer(spec.worker_id, spec.lease_seconds), seen=seen
        )
        try:
            rows = await asyncio.wait_for(asyncio.shield(waiter.future), spec.wait_seconds)
        except TimeoutError:
            self._dispatcher.unregister(waiter)
            # a pass may have handed rows at the very deadline: they are this waiter's
            if waiter.future.done() and not waiter.future.cancelled():
                rows = waiter.future.result()
            else:
                waiter.future.cancel()
                return []
        except asyncio.CancelledError:
            # the request is gone: runs leased for it go back to the queue now
            await asyncio.shield(self._dispatcher.abandon(waiter))
            raise
        return self._delivered(spec, rows)

    async def _leased_unless_gone(
        self, worker_id: str, leasing: Coroutine[Any, Any, list[asyncpg.Record]]
    ) -> list[asyncpg.Record]:
        """Run a leasing statement to its end even when the request is cancelled meanwhile
        (its client went away): the rows it leased for a request that is gone are released
        at once instead of staying leased, unseen, until their lease runs out."""
        task = asyncio.ensure_future(leasing)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(lambda done: self._release_if_leased(worker_id, done))
            raise

    def _release_if_leased(
        self, worker_id: str, done: asyncio.Future[list[asyncpg.Record]]
    ) -> None:
        if done.cancelled() or done.exception() is not None or not done.result():
            return
        release = asyncio.ensure_future(self._release(worker_id, done.result()))
        self._releases.add(release)
        release.add_done_callback(self._releases.discard)

    async def _reclaim(self) -> int:
        stale: list[asyncpg.Record] = []

        async def reclaim(conn: PoolConnectionProxy[asyncpg.Record]) -> list[asyncpg.Record]:
            while True:
                batch = await conn.fetch(queries.RECLAIM_STALE, self._max_attempts)
                stale.extend(batch)
                if len(batch) < queries.RECLAIM_STALE_BATCH:
                    return stale

        await self._run(reclaim)
        record_ended_leases(self._metrics, stale, trigger="claim")
        return len(stale)

    async def _release(self, worker_id: str, rows: list[asyncpg.Record]) -> None:
        ids = [row["id"] for row in rows]
        attempts = [row["attempt"] for row in rows]
        released = await self._run(
            lambda conn: conn.fetch(queries.RELEASE_UNDELIVERED, ids, worker_id, attempts)
        )
        for row in released:
            log.info(
                "undelivered claim released",
                extra={"run_id": str(row["id"]), "worker_id": worker_id},
            )

    async def _claim_once(self, spec: ClaimSpec, *, polling: bool) -> list[asyncpg.Record]:
        """The claim's own look at the queue. A claim that will wait (`polling`) asks its
        statement whether a stale claim held it back (queries.DISPATCH_CLAIM): when none
        did, an empty answer is final, one transaction, as the dispatcher hands it
        whatever opens from now on; an idle fleet's return to the long poll costs one
        statement instead of three."""
        key = _key(spec)
        labels = key.labels
        started = time.perf_counter()
        claimer = Claimer(spec.worker_id, spec.lease_seconds)
        # Autocommit statements, no BEGIN/COMMIT round trips; when nothing is stale the
        # reclaim writes nothing.
        held_back = True
        if polling:
            rows, held_back = await self._polling_together.submit(key, claimer)
        else:
            rows = await self._together.submit(key, claimer)
        stale: list[asyncpg.Record] = []
        if not rows and held_back:
            args = (spec.worker_id, spec.lease_seconds, spec.limit, key.labels_mode, list(labels))

            async def reclaim_then_claim(
                conn: PoolConnectionProxy[asyncpg.Record],
            ) -> list[asyncpg.Record]:
                # One bounded batch at a time, until a batch comes back short: then every
                # stale claim this claim could lock is reopened, so it selects in claim
                # order among all of them (a claim never leases a run that ranks below a
                # stale claim left for a later batch). A row another transaction holds (a
                # concurrent claim's reclaim, a close being refused) is skipped, not
                # waited for: that reclaim reopens it, or the next claim does.
                while True:
                    batch = await conn.fetch(queries.RECLAIM_STALE, self._max_attempts)
                    stale.extend(batch)
                    if len(batch) < queries.RECLAIM_STALE_BATCH:
                        break
                return await conn.fetch(queries.CLAIM, *args)

            # A reclaim repeated finds nothing left to reopen: safe to run again when the
            # claim statement was never sent.
            rows = await self._run(reclaim_then_claim)
        self._metrics.claim_latency.observe(time.perf_counter() - started)
        record_ended_leases(self._metrics, stale, trigger="claim")
        return rows

    def _delivered(self, spec: ClaimSpec, rows: list[asyncpg.Record]) -> list[dict[str, Any]]:
        self._metrics.claimed.inc(len(rows))
        for row in rows:
            log.info(
                "run claimed",
                extra={
                    "run_id": str(row["id"]),
                    "worker_id": spec.worker_id,
                    "attempt": row["attempt"],
                },
            )
        return [project(r) for r in rows]

    def _claimers_per_statement(self, key: ClaimKey) -> int:
        return min(self._coalesce_max, MAX_ROWS_PER_CLAIM_STATEMENT // key.limit)

    async def _lease_together(
        self, key: ClaimKey, claimers: list[Claimer]
    ) -> list[list[asyncpg.Record]]:
        """One leasing statement for claims that arrived together: the rows of each."""
        self._metrics.coalesced_claims.observe(len(claimers))
        labels = list(key.labels)
        if len(claimers) == 1 and key.limit == 1:
            one = claimers[0]
            single = (one.worker_id, one.lease_seconds, key.labels_mode, labels)
            return [
                await self._run(lambda conn: conn.fetch(queries.CLAIM_ONE_UNLESS_STALE, *single))
            ]
        if len(claimers) == 1 and key.limit <= queries.CLAIM_LIMIT_CEILING:
            one = claimers[0]
            args = (one.worker_id, one.lease_seconds, key.limit, key.labels_mode, labels)
            return [await self._run(lambda conn: conn.fetch(queries.CLAIM_UNLESS_STALE, *args))]
        leased, _ = await self._lease_many(queries.CLAIM_MANY_UNLESS_STALE, key, claimers)
        return leased

    async def _lease_for_waiters(
        self, key: ClaimKey, claimers: list[Claimer]
    ) -> tuple[list[list[asyncpg.Record]], bool]:
        """A dispatch pass's one statement (queries.DISPATCH_CLAIM): the rows of each waiter,
        and whether a stale claim held the statement back (only then is a reclaim worth
        a transaction)."""
        self._metrics.dispatched_claims.observe(len(claimers))
        return await self._lease_telling_held_back(key, claimers)

    async def _lease_for_pollers(
        self, key: ClaimKey, claimers: list[Claimer]
    ) -> list[tuple[list[asyncpg.Record], bool]]:
        """Claims that will wait, arrived together: each one's rows, and the held-back flag."""
        self._metrics.coalesced_claims.observe(len(claimers))
        leased, held_back = await self._lease_telling_held_back(key, claimers)
        return [(rows, held_back) for rows in leased]

    async def _lease_telling_held_back(
        self, key: ClaimKey, claimers: list[Claimer]
    ) -> tuple[list[list[asyncpg.Record]], bool]:
        return await self._lease_many(queries.DISPATCH_CLAIM, key, claimers)

    async def _lease_many(
        self, statement: str, key: ClaimKey, claimers: list[Claimer]
    ) -> tuple[list[list[asyncpg.Record]], bool]:
        """One statement of the claimers-array shape (CLAIM_MANY_UNLESS_STALE, DISPATCH_CLAIM):
        each claimer's rows in claim order, and whether the statement's held-back marker
        row (DISPATCH_CLAIM only; claimers count from 1) said a stale claim held it back."""
        rows = await self._run(
            lambda conn: conn.fetch(
                statement,
                [c.worker_id for c in claimers],
                [c.lease_seconds for c in claimers],
                key.limit,
                key.labels_mode,
                list(key.labels),
            ),
        )
        leased: list[list[asyncpg.Record]] = [[] for _ in claimers]
        held_back = False
        for row in sorted(rows, key=lambda r: r["claim_rank"]):
            if row["claimer"] == queries.DISPATCH_HELD_BACK:
                held_back = True
            else:
                leased[row["claimer"] - 1].append(row)
        return leased, held_back

    async def _run(
        self,
        work: Callable[[PoolConnectionProxy[asyncpg.Record]], Awaitable[list[asyncpg.Record]]],
    ) -> list[asyncpg.Record]:
        # Claim statements set no session state (queries.py): the release may skip the
        # session reset query, a round trip per claim.
        return await run_unit(self._pool, Unit.STATEMENTS, work, untouched=True)
