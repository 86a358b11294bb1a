"""The operator's actions on runs, as units of work: requeue, cancel, expire leases.

Each action that changes a row is one short transaction that also writes its audit
entry, so the change and its record commit together; a refusal rolls back and is
recorded on its own (audit.py). The decisions are pure (decisions.py).

- Requeue: reads the original (a failed or expired row never changes again, so it takes
  no lock), answers the successor an earlier requeue with the same key made (200), or
  inserts a new open successor (201). Two requeues with one key race on the unique
  idempotency key: one inserts, the other's insert waits for it and then finds its row.
- Cancel: locks the row (FOR NO KEY UPDATE, as a close does) and fails it. A complete,
  fail or heartbeat of the same run either went first (the cancel then finds a terminal
  row: state_conflict) or waits and finds the run failed and ownerless (terminal_conflict
  / state_conflict): exactly one of them changes the run.
- Expire leases: the queue's own unit of work (queue/service.py), its audit entry written
  in its transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.operator import queries
from activity_core.operator.audit import Actor, AuditLog, AuditRecord, audit_target
from activity_core.operator.connection import connection
from activity_core.operator.decisions import (
    cancel_error,
    decide_cancel,
    decide_requeue,
    successor_key,
)
from activity_core.queue import queries as queue_queries
from activity_core.queue.errors import QueueRefusal
from activity_core.queue.projection import project
from activity_core.queue.service import QueueService
from ops_contracts import AuditOutcome, RefusalCode
from ops_evidence import sanitize_error

__all__ = ["RequeueResult", "RunActions"]

log = logging.getLogger("activity_core.operator")


@dataclass(frozen=True)
class RequeueResult:
    run_id: uuid.UUID
    successor: dict[str, Any] | None  # the projection of the successor, unless refused
    created: bool = False  # a new successor (201), not an earlier one (200)
    refusal: QueueRefusal | None = None


class RunActions:
    def __init__(self, pool: asyncpg.Pool, *, queue: QueueService, audit: AuditLog) -> None:
        self._pool = pool
        self._queue = queue
        self._audit = audit

    # -- requeue -----------------------------------------------------------------------------

    async def requeue(
        self, actor: Actor, run_id: uuid.UUID, idempotency_key: str | None
    ) -> tuple[dict[str, Any], bool]:
        """(the successor's projection, whether this request made it). Raises QueueRefusal
        (not_found, state_conflict), recorded in the audit trail."""
        target = audit_target("ops_run", run_id)
        try:
            async with connection(self._pool) as conn, conn.transaction():
                row, created = await self._requeue(conn, run_id, idempotency_key)
                details: dict[str, Any] = {"successor": str(row["id"])}
                if idempotency_key is not None:
                    details["idempotency_key"] = idempotency_key
                outcome = AuditOutcome.applied if created else AuditOutcome.repeated
                await self._audit.record(
                    actor, AuditRecord("requeue", target, outcome, details=details), conn=conn
                )
        except QueueRefusal as refusal:
            await self._audit.refused(actor, "requeue", target, refusal)
            raise
        log.info(
            "run %s as %s by operator %s",
            "requeued" if created else "requeue repeated",
            row["id"],
            actor.name,
            extra={"run_id": str(run_id), "request_id": actor.request_id},
        )
        return project(row), created

    async def _requeue(
        self,
        conn: PoolConnectionProxy[asyncpg.Record],
        run_id: uuid.UUID,
        idempotency_key: str | None,
    ) -> tuple[asyncpg.Record, bool]:
        key = successor_key(run_id, idempotency_key)
        original = await conn.fetchrow(queries.REQUEUE_SOURCE, run_id)
        if original is not None:
            earlier = await conn.fetchrow(queries.RUN_BY_KEY, key)
            if earlier is not None:
                return _successor_of(earlier, run_id), False
        refusal = decide_requeue(original)
        if refusal is not None:
            raise QueueRefusal(refusal.code, refusal.detail)
        inserted = await conn.fetchrow(queries.REQUEUE, run_id, uuid.uuid4(), key)
        if inserted is not None:
            return inserted, True
        # A requeue with the same key committed while this one waited on the unique key:
        # this statement's fresh snapshot sees its successor.
        earlier = await conn.fetchrow(queries.RUN_BY_KEY, key)
        if earlier is None:  # the original changed state under us: it cannot (terminal)
            raise QueueRefusal(RefusalCode.state_conflict, "the run cannot be requeued now")
        return _successor_of(earlier, run_id), False

    async def requeue_many(
        self, actor: Actor, run_ids: Sequence[uuid.UUID], idempotency_key: str | None
    ) -> list[RequeueResult]:
        """Each run on its own (its own transaction and audit entry), in the given order."""
        results = []
        for run_id in run_ids:
            try:
                successor, created = await self.requeue(actor, run_id, idempotency_key)
            except QueueRefusal as refusal:
                results.append(RequeueResult(run_id, None, refusal=refusal))
            else:
                results.append(RequeueResult(run_id, successor, created=created))
        return results

    # -- cancel ------------------------------------------------------------------------------

    async def cancel(self, actor: Actor, run_id: uuid.UUID, reason: str) -> dict[str, Any]:
        """The run after the cancel (failed). Raises QueueRefusal (not_found,
        state_conflict), recorded in the audit trail."""
        target = audit_target("ops_run", run_id)
        try:
            async with connection(self._pool) as conn, conn.transaction():
                row = await conn.fetchrow(queue_queries.LOCK_RUN_FOR_CLOSE, run_id)
                refusal = decide_cancel(row)
                if refusal is not None:
                    raise QueueRefusal(refusal.code, refusal.detail)
                assert row is not None
                updated = await conn.fetchrow(
                    queries.CANCEL, run_id, cancel_error(row, actor.name, reason), actor.name
                )
                details = {
                    "reason": sanitize_error(reason),
                    "state": row["state"],
                    "holder": row["claim_owner"],
                    "attempt": row["attempt"],
                }
                await self._audit.record(
                    actor,
                    AuditRecord("cancel", target, AuditOutcome.applied, details=details),
                    conn=conn,
                )
        except QueueRefusal as refusal:
            await self._audit.refused(actor, "cancel", target, refusal)
            raise
        log.info(
            "run cancelled by operator %s",
            actor.name,
            extra={
                "run_id": str(run_id),
                "worker_id": row["claim_owner"],
                "attempt": row["attempt"],
                "request_id": actor.request_id,
            },
        )
        assert updated is not None
        return project(updated)

    # -- expire leases -----------------------------------------------------------------------

    async def expire_leases(self, actor: Actor) -> tuple[int, int]:
        """(reopened, expired), recorded in the audit trail in the same transaction."""

        async def recorded(
            conn: PoolConnectionProxy[asyncpg.Record], reopened: int, expired: int
        ) -> None:
            details = {"reopened": reopened, "expired": expired}
            entry = AuditRecord("expire-leases", "queue", AuditOutcome.applied, details=details)
            await self._audit.record(actor, entry, conn=conn)

        return await self._queue.expire_leases(recorded)


def _successor_of(row: asyncpg.Record, run_id: uuid.UUID) -> asyncpg.Record:
    if row["requeued_from"] != run_id:
        # only a hand-written row could hold a requeue key of another run
        raise QueueRefusal(
            RefusalCode.state_conflict,
            "the idempotency key names a run that is not a requeue of this one",
        )
    return row
