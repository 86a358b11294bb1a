"""An operator's pause and resume of an automation: its row and its Temporal Schedule agree.

The database keeps who paused it, when and why (`paused_by`, `paused_at`, `pause_reason`,
migration 0007) and the one `paused` flag every reader consults; the Temporal Schedule is
paused with a note naming the operator. Both change in one unit of work (pause_queries.py):
the Temporal call is made while the row is locked, inside the transaction, so a Temporal
failure leaves the row as it was (503, retry).

Refusals, in this order: no such automation (not_found); an automation without a schedule,
fired manually only (state_conflict: there is nothing to pause); for a resume, one that its
definition file pauses or that was removed from the files (state_conflict: the file is the
authority there; change it and sync). A repeat is no change: the same pause again keeps
the first pause's operator, time and reason, a resume of an active automation answers it as
it is (`changed` False, audited `repeated`); either still brings a Temporal Schedule that
disagrees with the database back in line.

A sync never undoes an operator's pause (definitions/sync.py): it applies a changed cron
to a schedule that stays paused. A schedule Temporal does not have yet (the definition
was never synced while Temporal was up) is not refused: the row is changed, and the next
sync creates the schedule paused or not as the row says.

Next fire times come from the Schedule itself (its description's next action times), and
are empty while it is paused.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from temporalio.client import Client, ScheduleDescription
from temporalio.service import RPCError, RPCStatusCode

from activity_core.db.unavailable import is_unavailable
from activity_core.definitions.queries import SYNC_LOCK_NAMESPACE
from activity_core.queue.errors import DatabaseUnavailable, QueueRefusal
from activity_core.temporal import pause_queries as queries
from activity_core.temporal.client import TemporalClientProvider, is_unreachable
from activity_core.temporal.errors import TemporalUnavailable
from activity_core.temporal.schedules import schedule_id
from ops_contracts import RefusalCode
from ops_evidence import sanitize_error

__all__ = [
    "MAX_REASON_LENGTH",
    "AutomationPauses",
    "AutomationState",
    "ScheduleStatus",
    "pause_note",
]

log = logging.getLogger("activity_core.temporal.pause")

MAX_REASON_LENGTH = 500
# How many upcoming fire times a view shows (Temporal answers up to ten).
NEXT_FIRES = 5
# Temporal bounds a schedule's note; ours names the operator and the reason, cut to this.
MAX_NOTE_LENGTH = 600


def _database_unavailable(exc: Exception) -> bool:
    """A lost database (db/unavailable.py), or the schedules lock still held by a sync
    applying its schedules after the lock timeout."""
    return is_unavailable(exc) or isinstance(exc, asyncpg.exceptions.LockNotAvailableError)


# What the Temporal Schedule says: `active` / `paused`; `absent` when Temporal has no
# schedule for a scheduled definition (not synced since Temporal was up); `unreachable`
# when a view could not ask. None for an automation fired manually only.
ScheduleStatus = Literal["active", "paused", "absent", "unreachable"]


@dataclass(frozen=True)
class AutomationState:
    id: uuid.UUID
    slug: str
    title: str
    cron: str | None
    timezone: str | None
    paused: bool
    # the operator's pause; all three None when no operator holds it
    paused_by: str | None
    paused_at: datetime | None
    reason: str | None
    # paused by its definition file (`paused: true`) or retired from the files
    paused_by_definition: bool
    schedule: ScheduleStatus | None
    next_fire_times: list[datetime]
    # False for a repeat that changed nothing in the database
    changed: bool = True


def pause_note(operator: str, reason: str | None) -> str:
    note = f"activity-core: paused by operator {operator}"
    return (note + (f": {reason}" if reason else ""))[:MAX_NOTE_LENGTH]


def _as_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


class AutomationPauses:
    """Pause, resume and read an automation's pause, against the pool and Temporal."""

    def __init__(self, pool: asyncpg.Pool, temporal: TemporalClientProvider) -> None:
        self._pool = pool
        self._temporal = temporal

    async def pause(
        self, automation: str, *, operator: str, reason: str | None = None
    ) -> AutomationState:
        """Raises QueueRefusal (not_found, state_conflict), DatabaseUnavailable or
        TemporalUnavailable."""
        reason = sanitize_error(reason)[:MAX_REASON_LENGTH] if reason is not None else None
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                row = await self._locked(conn, automation)
                changed = row["paused_by"] is None
                if changed:
                    row = await _one(conn.fetchrow(queries.PAUSE, row["id"], operator, reason))
                note = pause_note(row["paused_by"], row["pause_reason"])
                described = await self._converge(row["slug"], paused=True, note=note, force=changed)
        except Exception as exc:
            if not _database_unavailable(exc):
                raise
            raise DatabaseUnavailable(type(exc).__name__) from exc
        if changed:
            log.info("automation %s paused by operator %s", row["slug"], operator)
        return _state(row, described, changed=changed)

    async def resume(self, automation: str, *, operator: str) -> AutomationState:
        """Raises QueueRefusal (not_found, state_conflict), DatabaseUnavailable or
        TemporalUnavailable."""
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                row = await self._locked(conn, automation)
                if row["file_paused"] or row["removed"]:
                    why = (
                        "was removed from the definition files"
                        if row["removed"]
                        else ("is paused by its definition file (paused: true)")
                    )
                    raise QueueRefusal(
                        RefusalCode.state_conflict,
                        f"automation {row['slug']!r} {why}; change the file and run "
                        "sync-definitions",
                    )
                changed = row["paused_by"] is not None
                if changed:
                    row = await _one(conn.fetchrow(queries.RESUME, row["id"]))
                note = f"activity-core: resumed by operator {operator}"[:MAX_NOTE_LENGTH]
                described = await self._converge(row["slug"], paused=False, note=note, force=False)
        except Exception as exc:
            if not _database_unavailable(exc):
                raise
            raise DatabaseUnavailable(type(exc).__name__) from exc
        if changed:
            log.info("automation %s resumed by operator %s", row["slug"], operator)
        return _state(row, described, changed=changed)

    async def state(self, automation: str) -> AutomationState:
        """The automation's pause and its schedule's next fire times; a Temporal that cannot
        be asked shows as `schedule: unreachable`, never as a failure of the read.

        Raises QueueRefusal (not_found) or DatabaseUnavailable."""
        try:
            row = await self._pool.fetchrow(queries.AUTOMATION, _as_uuid(automation), automation)
        except Exception as exc:
            if not _database_unavailable(exc):
                raise
            raise DatabaseUnavailable(type(exc).__name__) from exc
        if row is None:
            raise QueueRefusal(RefusalCode.not_found, f"no automation {automation!r}")
        if row["schedule_cron"] is None:
            return _state(row, None)
        try:
            client = await self._temporal.get()
            described = await _describe(client, row["slug"], self._temporal.address)
        except TemporalUnavailable:
            return _state(row, None, schedule="unreachable")
        return _state(row, described)

    async def _locked(
        self, conn: PoolConnectionProxy[asyncpg.Record], automation: str
    ) -> asyncpg.Record:
        await conn.execute(queries.LOCK_TIMEOUT)
        await conn.execute(queries.SCHEDULES_LOCK, SYNC_LOCK_NAMESPACE)
        row = await conn.fetchrow(queries.AUTOMATION_FOR_CHANGE, _as_uuid(automation), automation)
        if row is None:
            raise QueueRefusal(RefusalCode.not_found, f"no automation {automation!r}")
        if row["schedule_cron"] is None:
            raise QueueRefusal(
                RefusalCode.state_conflict,
                f"automation {row['slug']!r} has no schedule (it is fired manually only); "
                "there is nothing to pause or resume",
            )
        return row

    async def _converge(
        self, slug: str, *, paused: bool, note: str, force: bool
    ) -> ScheduleDescription | None:
        """Bring the Schedule to `paused` (`force`: pause it again, so its note names
        this operator, when the file had paused it already); its description afterwards,
        or None when Temporal has no schedule for it (the next sync creates it as the row
        says)."""
        client = await self._temporal.get()
        address = self._temporal.address
        described = await _describe(client, slug, address)
        if described is None or (described.schedule.state.paused == paused and not force):
            return described
        handle = client.get_schedule_handle(schedule_id(slug))
        try:
            if paused:
                await handle.pause(note=note)
            else:
                await handle.unpause(note=note)
        except RPCError as exc:
            raise _unavailable(address, exc) from exc
        except RuntimeError as exc:
            if is_unreachable(exc):
                raise _unavailable(address, exc) from exc
            raise
        return await _describe(client, slug, address)


async def _one(fetch: Awaitable[asyncpg.Record | None]) -> asyncpg.Record:
    """The row an UPDATE of a row this transaction holds locked returns."""
    row = await fetch
    if row is None:  # the row is locked by this transaction: it cannot have gone
        raise RuntimeError("the locked definition row vanished")
    return row


async def _describe(client: Client, slug: str, address: str) -> ScheduleDescription | None:
    try:
        return await client.get_schedule_handle(schedule_id(slug)).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise _unavailable(address, exc) from exc
    except RuntimeError as exc:
        if is_unreachable(exc):
            raise _unavailable(address, exc) from exc
        raise


def _unavailable(address: str, exc: BaseException) -> TemporalUnavailable:
    status = exc.status.name if isinstance(exc, RPCError) else type(exc).__name__
    # unreachable, or refusing our namespace: either way not the request's fault
    return TemporalUnavailable(f"Temporal at {address} refused the schedule call: {status}")


def _state(
    row: asyncpg.Record,
    described: ScheduleDescription | None,
    *,
    changed: bool = True,
    schedule: ScheduleStatus | None = None,
) -> AutomationState:
    if schedule is None and row["schedule_cron"] is not None:
        if described is None:
            schedule = "absent"
        else:
            schedule = "paused" if described.schedule.state.paused else "active"
    next_fires = (
        list(described.info.next_action_times[:NEXT_FIRES])
        if described is not None and not described.schedule.state.paused
        else []
    )
    return AutomationState(
        id=row["id"],
        slug=row["slug"],
        title=row["title"],
        cron=row["schedule_cron"],
        timezone=row["schedule_timezone"],
        paused=row["paused"],
        paused_by=row["paused_by"],
        paused_at=row["paused_at"],
        reason=row["pause_reason"],
        paused_by_definition=bool(row["file_paused"] or row["removed"]),
        schedule=schedule,
        next_fire_times=next_fires,
        changed=changed,
    )
