"""The queue's units of work, behind one facade the HTTP edge and the operator use.

A claim is claim.py's, a close close.py's; here are the rest (heartbeat, expire-leases,
get, list, counts). Each unit of work runs through db/unavailable.py's run_unit, which
says what it is (a read, one transaction, autocommit statements): a lost connection is
DatabaseUnavailable (503), and the unit runs once more only where its first run cannot
have changed anything. A heartbeat and expire-leases are one transaction each, repeated
when the connection was lost before COMMIT.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.changes.verify import DEFAULT_TIMEOUT_S
from activity_core.db.keyset import encode_cursor
from activity_core.db.unavailable import Unit, run_unit
from activity_core.queue import queries
from activity_core.queue.changes_upload import ChangesUploads
from activity_core.queue.claim import Claims, ClaimSpec, record_ended_leases
from activity_core.queue.close import Closes, refusal
from activity_core.queue.close_decision import decide_heartbeat
from activity_core.queue.errors import QueueRefusal, query_cursor
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.projection import project
from activity_core.queue.sightings import ClaimSightings
from activity_core.queue.wakeups import OpenRunSignal
from activity_core.uuid_text import uuid_or_none
from ops_contracts import CloseDisposition, RefusalCode, RunState

__all__ = ["ListFilter", "QueueService", "definition_id_of"]

log = logging.getLogger("activity_core.queue")

T = TypeVar("T")


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


async def definition_id_of(conn: PoolConnectionProxy[asyncpg.Record], automation: str) -> uuid.UUID:
    """The definition id of an automation named by its slug or its UUID; not_found when
    there is none."""
    found = await conn.fetchval(queries.DEFINITION_ID, automation, uuid_or_none(automation))
    if found is None:
        raise QueueRefusal(RefusalCode.not_found, f"no automation {automation}")
    definition_id: uuid.UUID = found
    return definition_id


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
        changes_git_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._pool = pool
        self._max_attempts = max_attempts
        self._metrics = metrics
        self._signal = signal
        self._claims = Claims(
            pool,
            max_attempts=max_attempts,
            metrics=metrics,
            signal=signal,
            sightings=sightings,
            coalesce_max=coalesce_max,
        )
        self._closes = Closes(
            pool, max_attempts=max_attempts, metrics=metrics, coalesce_max=coalesce_max
        )
        self._changes = ChangesUploads(pool, metrics=metrics, git_timeout_s=changes_git_timeout_s)

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
        self._claims.drain()

    @property
    def max_attempts(self) -> int:
        return self._max_attempts

    async def claim(self, spec: ClaimSpec) -> list[dict[str, Any]]:
        return await self._claims.claim(spec)

    # -- heartbeat -----------------------------------------------------------------------

    async def heartbeat(
        self, run_id: uuid.UUID, worker_id: str, lease_seconds: int, *, attempt: int | None = None
    ) -> dict[str, Any]:
        async def extend(conn: PoolConnectionProxy[asyncpg.Record]) -> asyncpg.Record | None:
            row = await conn.fetchrow(queries.LOCK_RUN_FOR_CLOSE, run_id)
            refused = decide_heartbeat(row, worker_id, attempt)
            if refused is not None:
                raise refusal(refused, run_id, worker_id, "heartbeat")
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
        return await self._closes.complete(run_id, worker_id, raw_result, attempt=attempt)

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
        return await self._closes.fail(
            run_id, worker_id, error, reopen=reopen, raw_result=raw_result, attempt=attempt
        )

    # -- changes ---------------------------------------------------------------------------

    async def upload_changes(
        self,
        run_id: uuid.UUID,
        worker_id: str,
        attempt: int,
        bundle: bytes,
        *,
        claimed_digest: str,
    ) -> tuple[dict[str, Any], bool]:
        """Store the attempt's changes bundle (queue/changes_upload.py): the stored row's
        answer, and whether this call stored it (else the same digest was stored)."""
        return await self._changes.upload(
            run_id, worker_id, attempt, bundle, claimed_digest=claimed_digest
        )

    # -- operator ---------------------------------------------------------------------------

    async def expire_leases(
        self,
        recorded: Callable[[PoolConnectionProxy[asyncpg.Record], int, int], Awaitable[None]]
        | None = None,
    ) -> tuple[int, int]:
        """(reopened, expired). `recorded(conn, reopened, expired)` runs in the same
        transaction, before COMMIT (the operator's audit entry: both commit or neither)."""

        async def expire(conn: PoolConnectionProxy[asyncpg.Record]) -> list[asyncpg.Record]:
            rows = await conn.fetch(queries.EXPIRE_LEASES, self._max_attempts)
            if recorded is not None:
                reopened, expired = _ended(rows)
                await recorded(conn, reopened, expired)
            return rows

        rows = await self._run(Unit.TRANSACTION, expire)
        record_ended_leases(self._metrics, rows, trigger="expire-leases")
        return _ended(rows)

    async def get(self, run_id: uuid.UUID) -> dict[str, Any]:
        row = await self._run(Unit.READ, lambda conn: conn.fetchrow(queries.GET_RUN, run_id))
        if row is None:
            raise QueueRefusal(RefusalCode.not_found, "no ops run with this id")
        return project(row)

    async def list(self, flt: ListFilter) -> tuple[list[dict[str, Any]], str | None]:
        cursor_at, cursor_id = query_cursor(flt.cursor) if flt.cursor else (None, None)

        async def page_of(conn: PoolConnectionProxy[asyncpg.Record]) -> list[asyncpg.Record]:
            definition_id = flt.activity_definition_id
            if flt.automation is not None:
                automation_id = await definition_id_of(conn, flt.automation)
                if definition_id is not None and definition_id != automation_id:
                    return []  # two filters no run can match at once
                definition_id = automation_id
            return await conn.fetch(
                queries.LIST_RUNS_IN_STATE if flt.state else queries.LIST_RUNS,
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


def _ended(rows: Sequence[asyncpg.Record]) -> tuple[int, int]:
    """(reopened, expired) of the leases EXPIRE_LEASES ended."""
    expired = sum(1 for r in rows if r["state"] == RunState.expired)
    return len(rows) - expired, expired
