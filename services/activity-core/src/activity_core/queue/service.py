"""The queue's units of work. A claim is one leasing statement when nothing is stale
(else reclaim, then lease); a close is one conditional UPDATE in the common case (else a
short transaction that locks its row and lets decide_close answer).

Routers call these; these own the transaction and call the SQL in queries.py and the
pure decisions in close_decision.py. Each unit of work runs through db/unavailable.py's
run_unit, which says what it is (a read, one transaction, autocommit statements): a lost
connection is DatabaseUnavailable (503), and the unit runs once more only where its first
run cannot have changed anything. A claim's leasing statement and the common close are
autocommit statements, so once sent they are never repeated here (a claim repeated after
it committed would lease twice); a locking close, a heartbeat and expire-leases are one
transaction each, repeated when the connection was lost before COMMIT.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.db.keyset import InvalidCursor, decode_cursor, encode_cursor
from activity_core.db.unavailable import Unit, run_unit
from activity_core.queue import queries
from activity_core.queue.close_decision import (
    ApplyTerminal,
    CloseRequest,
    Reconcile,
    Refuse,
    ReopenRun,
    decide_close,
    decide_heartbeat,
    terminal_state_without_row,
)
from activity_core.queue.coalesce import Coalescer
from activity_core.queue.errors import QueueRefusal
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.sightings import ClaimSightings
from activity_core.queue.wakeups import OpenRunSignal
from ops_contracts import (
    CloseAction,
    CloseDisposition,
    CloseIntent,
    LabelsMode,
    RefusalCode,
    RunState,
    close_intent_digest,
)
from ops_evidence import normalize_result, sanitize_error

__all__ = ["ClaimSpec", "ListFilter", "QueueService", "definition_id_of", "project"]

log = logging.getLogger("activity_core.queue")

T = TypeVar("T")


@dataclass(frozen=True)
class ClaimSpec:
    worker_id: str
    labels: Sequence[str] | None
    labels_mode: LabelsMode
    limit: int
    lease_seconds: int
    wait_seconds: int


# What claims must share to be served by one statement (labels mode, labels, limit), and
# what each claimer brings (worker id, lease seconds).
ClaimKey = tuple[str, tuple[str, ...], int]
Claimer = tuple[str, int]

# What closes bring to a shared statement: run id, closer, the state it reaches, request.
# They share one key: every common close has the same statement.
CloseKey = str
Closer = tuple[uuid.UUID, RunState, CloseRequest]
_COMMON_CLOSE: CloseKey = "leased-ungranted"

# A coalesced claim leases at most this many rows (claimers x limit), so one statement
# stays short however large the limits are.
MAX_ROWS_PER_CLAIM_STATEMENT = 500


@dataclass(frozen=True)
class ListFilter:
    state: RunState | None = None
    labels: Sequence[str] | None = None
    activity_definition_id: uuid.UUID | None = None
    target_repo: str | None = None
    cursor: str | None = None
    limit: int = 50
    # an automation's slug or UUID (refused not_found when there is none)
    automation: str | None = None
    # claim_owner: the lease holder, or a terminal run's last one
    worker: str | None = None
    # created_after <= created_at < created_before
    created_after: datetime | None = None
    created_before: datetime | None = None


def project(row: asyncpg.Record | dict[str, Any], *, normalized: bool = False) -> dict[str, Any]:
    """The read projection of every answer (get, list, claim, heartbeat, close): historic
    rows are normalized again before they leave, the result by the evidence allowlist and
    the error text by the function that bounds it when it is stored. `normalized`: the
    row's result and error are the ones this statement just stored, normalized on the way
    in (an applied close), so normalizing them again would change nothing.

    `requeued_as` comes from the statements that compute it (get, list, a reconciled
    close); every other answer is of a run that was open or claimed until that statement,
    which no requeue can have taken as its original (only failed and expired runs are)."""
    run = {key: row[key] for key in queries.RUN_COLUMN_NAMES}
    if not normalized:
        if run["result"] is not None:
            run["result"] = normalize_result(run["result"])
        if run["last_error"] is not None:
            run["last_error"] = sanitize_error(run["last_error"])
    run["requeued_as"] = row.get("requeued_as") or []
    return run


async def definition_id_of(conn: PoolConnectionProxy[asyncpg.Record], automation: str) -> uuid.UUID:
    """The definition id of an automation named by its slug or its UUID; not_found when
    there is none."""
    try:
        as_uuid: uuid.UUID | None = uuid.UUID(automation)
    except ValueError:
        as_uuid = None
    found = await conn.fetchval(queries.DEFINITION_ID, automation, as_uuid)
    if found is None:
        raise QueueRefusal(RefusalCode.not_found, f"no automation {automation}")
    definition_id: uuid.UUID = found
    return definition_id


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        return decode_cursor(cursor)
    except InvalidCursor as exc:
        raise QueueRefusal(RefusalCode.invalid_request, str(exc), loc=("query", "cursor")) from exc


class QueueService:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        max_attempts: int,
        metrics: QueueMetrics,
        signal: OpenRunSignal | None = None,
        coalesce_max: int = 32,
        sightings: ClaimSightings | None = None,
    ) -> None:
        self._pool = pool
        self._max_attempts = max_attempts
        self._metrics = metrics
        self._signal = signal
        self._sightings = sightings
        self._coalesce_max = coalesce_max
        self._claims: Coalescer[ClaimKey, Claimer, list[asyncpg.Record]] = Coalescer(
            self._lease_together, max_items=self._claimers_per_statement
        )
        self._closes: Coalescer[CloseKey, Closer, asyncpg.Record | None] = Coalescer(
            self._close_together, max_items=lambda _: coalesce_max
        )

    async def _run(
        self, unit: Unit, work: Callable[[PoolConnectionProxy[asyncpg.Record]], Awaitable[T]]
    ) -> T:
        # Queue statements set no session state (queries.py): the release may skip the
        # session reset query, a round trip per claim and per close.
        return await run_unit(self._pool, unit, work, untouched=True)

    # -- claim -------------------------------------------------------------------------

    def drain_long_polls(self) -> None:
        if self._signal is not None:
            self._signal.drain()

    @property
    def max_attempts(self) -> int:
        return self._max_attempts

    async def claim(self, spec: ClaimSpec) -> list[dict[str, Any]]:
        if self._sightings is not None:
            # in memory only; written to ops_workers off the claim path (sightings.py)
            self._sightings.record(spec.worker_id, spec.labels, spec.labels_mode.value, spec.limit)
        deadline = time.monotonic() + spec.wait_seconds
        while True:
            # Take the wake-up token before looking, so an emission between an empty
            # claim and the wait is never missed.
            waits = self._signal is not None and spec.wait_seconds and not self._signal.draining
            token = self._signal.token() if self._signal and waits else None
            runs = await self._claim_once(spec)
            remaining = deadline - time.monotonic()
            if runs or token is None or remaining <= 0:
                return runs
            if not await token.wait(remaining):
                return []

    async def _claim_once(self, spec: ClaimSpec) -> list[dict[str, Any]]:
        labels = tuple(spec.labels or ())
        key: ClaimKey = ("none" if not labels else spec.labels_mode.value, labels, spec.limit)
        started = time.perf_counter()
        # Claims with the same filter that arrive together share one leasing statement
        # (coalesce.py); it leases only when nothing is stale. An empty answer (nothing
        # open, or stale claims seen) reopens stale claims and claims again in a fresh
        # snapshot that sees the reopened rows. So a busy queue claims in one round trip,
        # and stale claims are always reopened before a claim selects. Autocommit
        # statements, no BEGIN/COMMIT round trips; when nothing is stale the reclaim
        # writes nothing.
        rows = await self._claims.submit(key, (spec.worker_id, spec.lease_seconds))
        stale: list[asyncpg.Record] = []
        if not rows:
            args = (spec.worker_id, spec.lease_seconds, spec.limit, key[0], list(labels))

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
            rows = await self._run(Unit.STATEMENTS, reclaim_then_claim)
        self._metrics.claim_latency.observe(time.perf_counter() - started)
        self._record_stale(stale, trigger="claim")
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
        return min(self._coalesce_max, MAX_ROWS_PER_CLAIM_STATEMENT // key[2])

    async def _lease_together(
        self, key: ClaimKey, claimers: list[Claimer]
    ) -> list[list[asyncpg.Record]]:
        """One leasing statement for claims that arrived together: the rows of each."""
        mode, labels, limit = key
        self._metrics.coalesced.labels(statement="claim").observe(len(claimers))
        if len(claimers) == 1 and limit <= queries.CLAIM_LIMIT_CEILING:
            worker_id, lease_seconds = claimers[0]
            args = (worker_id, lease_seconds, limit, mode, list(labels))
            return [
                await self._run(
                    Unit.STATEMENTS, lambda conn: conn.fetch(queries.CLAIM_UNLESS_STALE, *args)
                )
            ]
        rows = await self._run(
            Unit.STATEMENTS,
            lambda conn: conn.fetch(
                queries.CLAIM_MANY_UNLESS_STALE,
                [worker_id for worker_id, _ in claimers],
                [lease_seconds for _, lease_seconds in claimers],
                limit,
                mode,
                list(labels),
            ),
        )
        leased: list[list[asyncpg.Record]] = [[] for _ in claimers]
        for row in sorted(rows, key=lambda r: r["claim_rank"]):
            leased[row["claimer"] - 1].append(row)
        return leased

    def _record_stale(self, rows: Sequence[asyncpg.Record], *, trigger: str) -> None:
        for row in rows:
            outcome = "expired" if row["state"] == RunState.expired else "reopened"
            self._metrics.leases_ended.labels(outcome=outcome).inc()
            log.info(
                "stale lease %s",
                outcome,
                extra={
                    "run_id": str(row["id"]),
                    "worker_id": row["claim_owner"],
                    "trigger": trigger,
                },
            )

    # -- heartbeat -----------------------------------------------------------------------

    async def heartbeat(
        self, run_id: uuid.UUID, worker_id: str, lease_seconds: int, *, attempt: int | None = None
    ) -> dict[str, Any]:
        async def extend(conn: PoolConnectionProxy[asyncpg.Record]) -> asyncpg.Record | None:
            row = await conn.fetchrow(queries.LOCK_RUN_FOR_CLOSE, run_id)
            refusal = decide_heartbeat(row, worker_id, attempt)
            if refusal is not None:
                raise self._refuse(refusal, run_id, worker_id, "heartbeat")
            return await conn.fetchrow(queries.HEARTBEAT, run_id, lease_seconds)

        updated = await self._run(Unit.TRANSACTION, extend)
        assert updated is not None
        log.info("lease extended", extra={"run_id": str(run_id), "worker_id": worker_id})
        return project(updated)

    # -- complete / fail -------------------------------------------------------------------

    async def complete(
        self,
        run_id: uuid.UUID,
        worker_id: str,
        raw_result: dict[str, Any],
        *,
        attempt: int | None = None,
    ) -> tuple[dict[str, Any], CloseDisposition]:
        result = normalize_result(raw_result)
        intent = CloseIntent(
            action=CloseAction.complete,
            worker_id=worker_id,
            result=result,
            error=None,
            reopen=False,
        )
        return await self._close(run_id, intent, attempt)

    async def fail(
        self,
        run_id: uuid.UUID,
        worker_id: str,
        error: str,
        *,
        reopen: bool,
        raw_result: dict[str, Any] | None,
        attempt: int | None = None,
    ) -> tuple[dict[str, Any], CloseDisposition]:
        result = None if raw_result is None else normalize_result(raw_result)
        intent = CloseIntent(
            action=CloseAction.fail,
            worker_id=worker_id,
            result=result,
            error=sanitize_error(error),
            reopen=reopen,
        )
        return await self._close(run_id, intent, attempt)

    async def _close(
        self, run_id: uuid.UUID, intent: CloseIntent, attempt: int | None
    ) -> tuple[dict[str, Any], CloseDisposition]:
        # The attempt fences the close to one claim of the run; it is not part of the
        # intent, so a repeat of a recorded close reconciles whichever attempt it names.
        request = CloseRequest(
            action=intent.action,
            worker_id=intent.worker_id,
            result=intent.result,
            error=intent.error,
            reopen=intent.reopen,
            intent_digest=close_intent_digest(intent),
            attempt=attempt,
        )
        started = time.perf_counter()
        # The common close (the closer's active lease, at the attempt it names, on a run
        # queued without a grant) is one conditional UPDATE, shared with the common closes
        # that arrive together; no row back means "not that case" and nothing changed.
        state = terminal_state_without_row(request)
        updated: Any = None
        if state is not None:
            updated = await self._closes.submit(_COMMON_CLOSE, (run_id, state, request))
        disposition = CloseDisposition.applied
        if updated is None:
            updated, disposition = await self._run(
                Unit.TRANSACTION, lambda conn: self._close_locked(conn, run_id, request)
            )
        self._metrics.close_latency.observe(time.perf_counter() - started)
        self._metrics.closes.labels(action=intent.action.value, disposition=disposition.value).inc()
        log.info(
            "run %s %s",
            intent.action.value,
            disposition.value,
            extra={
                "run_id": str(run_id),
                "worker_id": intent.worker_id,
                "disposition": disposition.value,
            },
        )
        # an applied close stored the request's normalized result and error
        return project(updated, normalized=disposition is CloseDisposition.applied), disposition

    async def _close_together(
        self, key: CloseKey, closers: list[Closer]
    ) -> list[asyncpg.Record | None]:
        """Common closes that arrived together in one statement: each closer's row, or None
        where its run was not in that case (or was already in this statement)."""
        first: dict[uuid.UUID, int] = {}
        for n, (run_id, _, _) in enumerate(closers):
            first.setdefault(run_id, n)
        unique = [closers[n] for n in first.values()]
        self._metrics.coalesced.labels(statement="close").observe(len(unique))
        if len(unique) == 1:
            run_id, state, request = unique[0]
            row = await self._run(
                Unit.STATEMENTS,
                lambda conn: conn.fetchrow(
                    queries.CLOSE_LEASED_UNGRANTED,
                    run_id,
                    request.worker_id,
                    state.value,
                    request.result,
                    request.error,
                    request.intent_digest,
                    request.attempt,
                ),
            )
            rows = [] if row is None else [row]
        else:
            rows = await self._run(
                Unit.STATEMENTS,
                lambda conn: conn.fetch(
                    queries.CLOSE_MANY_LEASED_UNGRANTED,
                    [run_id for run_id, _, _ in unique],
                    [request.worker_id for _, _, request in unique],
                    [state.value for _, state, _ in unique],
                    [request.result for _, _, request in unique],
                    [request.error for _, _, request in unique],
                    [request.intent_digest for _, _, request in unique],
                    [request.attempt for _, _, request in unique],
                ),
            )
        by_run = {row["id"]: row for row in rows}
        return [
            by_run.get(run_id) if first[run_id] == n else None
            for n, (run_id, _, _) in enumerate(closers)
        ]

    async def _close_locked(
        self, conn: PoolConnectionProxy[asyncpg.Record], run_id: uuid.UUID, request: CloseRequest
    ) -> tuple[Any, CloseDisposition]:
        """Every close, inside its transaction: lock the row, let decide_close answer,
        apply what it decided."""
        row = await conn.fetchrow(queries.LOCK_RUN_FOR_CLOSE, run_id)
        decision = decide_close(row, request, max_attempts=self._max_attempts)
        if isinstance(decision, Refuse):
            raise self._refuse(decision, run_id, request.worker_id, request.action.value)
        assert row is not None
        if isinstance(decision, Reconcile):
            if row["state"] == RunState.succeeded:
                return row, CloseDisposition.reconciled
            # a failed or expired run may have been requeued since its close
            successors = await conn.fetchval(queries.REQUEUED_AS, run_id)
            return {**dict(row), "requeued_as": successors}, CloseDisposition.reconciled
        if isinstance(decision, ReopenRun):
            reopened = await conn.fetchrow(
                queries.REOPEN_AFTER_FAILURE, run_id, request.result, request.error
            )
            return reopened, CloseDisposition.reopened
        assert isinstance(decision, ApplyTerminal)
        applied = await conn.fetchrow(
            queries.CLOSE_TERMINAL,
            run_id,
            decision.state.value,
            request.result,
            request.error,
            request.intent_digest,
        )
        return applied, CloseDisposition.applied

    def _refuse(
        self, refusal: Refuse, run_id: uuid.UUID, worker_id: str, action: str
    ) -> QueueRefusal:
        log.info(
            "%s refused: %s",
            action,
            refusal.code.value,
            extra={"run_id": str(run_id), "worker_id": worker_id, "code": refusal.code.value},
        )
        return QueueRefusal(refusal.code, refusal.detail)

    # -- operator ---------------------------------------------------------------------------

    async def expire_leases(self) -> tuple[int, int]:
        rows = await self._run(
            Unit.TRANSACTION, lambda conn: conn.fetch(queries.EXPIRE_LEASES, self._max_attempts)
        )
        self._record_stale(rows, trigger="expire-leases")
        expired = sum(1 for r in rows if r["state"] == RunState.expired)
        return len(rows) - expired, expired

    async def get(self, run_id: uuid.UUID) -> dict[str, Any]:
        row = await self._run(Unit.READ, lambda conn: conn.fetchrow(queries.GET_RUN, run_id))
        if row is None:
            raise QueueRefusal(RefusalCode.not_found, "no ops run with this id")
        return project(row)

    async def list(self, flt: ListFilter) -> tuple[list[dict[str, Any]], str | None]:
        cursor_at, cursor_id = _decode_cursor(flt.cursor) if flt.cursor else (None, None)

        async def page_of(conn: PoolConnectionProxy[asyncpg.Record]) -> list[asyncpg.Record]:
            definition_id = flt.activity_definition_id
            if flt.automation is not None:
                automation_id = await definition_id_of(conn, flt.automation)
                if definition_id is not None and definition_id != automation_id:
                    return []  # two filters no run can match at once
                definition_id = automation_id
            return await conn.fetch(
                queries.LIST_RUNS,
                flt.state.value if flt.state else None,
                list(flt.labels) if flt.labels else None,
                definition_id,
                flt.target_repo,
                cursor_at,
                cursor_id,
                flt.limit + 1,
                flt.worker,
                flt.created_after,
                flt.created_before,
            )

        rows = await self._run(Unit.READ, page_of)
        page = rows[: flt.limit]
        next_cursor = (
            encode_cursor(page[-1]["created_at"], page[-1]["id"]) if len(rows) > flt.limit else None
        )
        return [project(r) for r in page], next_cursor

    async def count_by_state(self) -> dict[str, int]:
        rows = await self._run(Unit.READ, lambda conn: conn.fetch(queries.COUNT_BY_STATE))
        counts = {state.value: 0 for state in RunState}
        counts.update({r["state"]: int(r["n"]) for r in rows})
        return counts
