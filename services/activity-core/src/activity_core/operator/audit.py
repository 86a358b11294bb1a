"""The audit trail: every operator action, and every refusal of one, in `ops_audit`.

An entry says who (the operator's name and role), what (the action), on which target,
when, under which request id, and how it ended: `applied`, `repeated` (an idempotent
repeat answered with an earlier request's result) or `refused` with the refusal's code.
An action that changes a row writes its entry in the same transaction (`record(...,
conn=conn)`): the change and its record commit together. A refusal is written on its own
after the action's transaction has rolled back.

For an action of another context (pausing an automation, say) the whole protocol is one
context manager:

    async with audit.action(actor, "automation.pause", f"automation:{ref}") as act:
        ...                                   # raise a refusal, or do it
        act.resolved("automation", slug)      # the target as the trail names it
        await act.write(conn, {"schedule": "paused"})  # in the action's transaction

It records `refused` (with the code) when the block raises a QueueRefusal or an exception
mapped in `refusals`, and re-raises; any other exception (the database away, a bug)
records nothing. An action whose change is a database transaction writes its entry in it
(`act.write(conn, ...)`), so the change and its record commit together; one whose change
is a call to another system (a Temporal Schedule paused, a workflow started) writes it,
as its intent, in the transaction that is open across the call, before the call: a failed
write means the call was never made (503: nothing changed, retry). A block that wrote
nothing gets its `applied` entry when it ends.

`resolved`: an action addressed by another name of its target (an automation by its UUID)
is recorded under the name the trail and its filters use (`automation:<slug>`), its
refusals too once the target is known.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Union

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.db.unavailable import unavailable_on_loss
from activity_core.operator import queries
from activity_core.operator.connection import connection
from activity_core.queue.errors import QueueRefusal
from ops_contracts import AuditOutcome, OperatorRole, RefusalCode
from ops_evidence import sanitize_error

__all__ = ["Actor", "AuditLog", "AuditRecord", "AuditedAction", "audit_target"]

log = logging.getLogger("activity_core.operator.audit")

MAX_TARGET_LENGTH = 300
MAX_PAGE_SIZE = 200

# what a statement runs on: the action's connection (inside its transaction) or the pool
Executor = Union[asyncpg.Connection, "PoolConnectionProxy[asyncpg.Record]", asyncpg.Pool]


@dataclass(frozen=True)
class Actor:
    """Who acts: an operator-plane principal's name and role, and the request's id."""

    name: str
    role: OperatorRole
    request_id: str


@dataclass(frozen=True)
class AuditRecord:
    action: str  # "requeue", "cancel", "expire-leases", "fire", "automation.pause", …
    target: str  # "ops_run:<uuid>", "automation:<slug>", "queue"
    outcome: AuditOutcome
    code: str | None = None  # the refusal code; set exactly when refused
    detail: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class AuditedAction:
    """What the block of `AuditLog.action` may say about the action it did."""

    log: AuditLog
    actor: Actor
    action: str
    target: str
    outcome: AuditOutcome = AuditOutcome.applied
    detail: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    written: bool = False

    def resolved(self, kind: str, value: object) -> None:
        """Record the action (and a refusal from here on) under `kind:value`."""
        self.target = audit_target(kind, value)

    async def write(
        self, conn: Executor, details: Mapping[str, Any], *, repeated: bool = False
    ) -> None:
        """Write the entry now, on `conn` inside the action's transaction (see the module
        docstring); the block's end then writes nothing more."""
        self.details = dict(details)
        if repeated:
            self.outcome = AuditOutcome.repeated
        entry = AuditRecord(
            self.action, self.target, self.outcome, detail=self.detail, details=self.details
        )
        await self.log.record(self.actor, entry, conn=conn)
        self.written = True


def audit_target(kind: str, value: object) -> str:
    """`kind:value`, bounded and on one line (a path parameter is not validated yet when
    a refusal of its request is recorded)."""
    text = f"{kind}:{value}"
    return sanitize_error(text)[:MAX_TARGET_LENGTH]


class AuditLog:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def record(
        self, actor: Actor, entry: AuditRecord, *, conn: Executor | None = None
    ) -> None:
        """Write one entry; on `conn` (inside the action's transaction) when given.

        Raises DatabaseUnavailable when the database cannot be reached."""
        if (entry.outcome is AuditOutcome.refused) != (entry.code is not None):
            raise ValueError("a refused entry has a code, and only a refused one")
        args = (
            actor.name,
            actor.role.value,
            entry.action,
            entry.target[:MAX_TARGET_LENGTH],
            actor.request_id,
            entry.outcome.value,
            entry.code,
            sanitize_error(entry.detail) if entry.detail is not None else None,
            dict(entry.details),
        )
        with unavailable_on_loss():
            await (conn or self._pool).execute(queries.AUDIT_INSERT, *args)
        # the action logs what it did; a refusal is logged here, with who asked
        log.log(
            logging.INFO if entry.outcome is AuditOutcome.refused else logging.DEBUG,
            "operator %s: %s %s on %s (request %s)",
            actor.name,
            entry.action,
            entry.outcome.value,
            entry.target,
            actor.request_id,
            extra={"code": entry.code, "request_id": actor.request_id},
        )

    async def refused(self, actor: Actor, action: str, target: str, refusal: QueueRefusal) -> None:
        """Record a refusal, never masking it: a failure to write is logged, not raised."""
        entry = AuditRecord(
            action, target, AuditOutcome.refused, code=refusal.code.value, detail=refusal.detail
        )
        try:
            await self.record(actor, entry)
        except Exception as exc:
            log.warning(
                "could not record a refused %s in the audit trail: %s",
                action,
                type(exc).__name__,
                extra={
                    "operator": actor.name,
                    "target": target,
                    "code": refusal.code.value,
                    "request_id": actor.request_id,
                },
            )

    @asynccontextmanager
    async def action(
        self,
        actor: Actor,
        action: str,
        target: str,
        *,
        refusals: Mapping[type[Exception], RefusalCode] | None = None,
    ) -> AsyncIterator[AuditedAction]:
        """Audit the block as one action (see the module docstring)."""
        done = AuditedAction(self, actor, action, target)
        try:
            yield done
        except QueueRefusal as refusal:
            await self.refused(actor, action, done.target, refusal)
            raise
        except Exception as exc:
            code = _mapped(exc, refusals or {})
            if code is not None:
                await self.refused(actor, action, done.target, QueueRefusal(code, str(exc)))
            raise
        if done.written:
            return
        await self.record(
            actor,
            AuditRecord(
                action, done.target, done.outcome, detail=done.detail, details=done.details
            ),
        )

    async def page(
        self,
        *,
        target: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Entries newest first; and the `before` of the next page (None on the last)."""
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        async with connection(self._pool) as conn:
            rows = await conn.fetch(queries.AUDIT_PAGE, target, actor, action, before, limit + 1)
        page = [dict(row) for row in rows[:limit]]
        return page, (page[-1]["id"] if len(rows) > limit else None)


def _mapped(exc: Exception, refusals: Mapping[type[Exception], RefusalCode]) -> RefusalCode | None:
    for cls in type(exc).__mro__:
        if cls in refusals:
            return refusals[cls]
    return None
