"""An operator's pause and resume of an automation: its row and its Temporal Schedule agree.

The database keeps who paused it, when and why (`paused_by`, `paused_at`, `pause_reason`,
migration 0007) and the one `paused` flag every reader consults; the Temporal Schedule is
paused with a note naming the operator. Both change in one unit of work (pause_queries.py),
with the action's audit entry: the row is locked and changed, the entry written (as the
intent, before the Temporal call), then the Temporal call is made inside the transaction.
A failed audit write means no Temporal call, a Temporal failure rolls the row and the
entry back: a 503 means nothing changed, retry. A COMMIT that fails after the call puts
the Schedule back as it was (`_change`).

Refusals, in this order: no such automation (not_found); an automation without a schedule,
fired manually only (state_conflict: there is nothing to pause), except for a resume of an
operator's pause (its definition lost its schedule since: the row alone is resumed, and it
fires manually again); for a resume, one that its definition file pauses or that was
removed from the files (state_conflict: the file is the authority there; change it and
sync). A repeat is no change: the same pause again keeps
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
from collections.abc import Awaitable, Callable
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
from activity_core.temporal.audit_entry import ActionAudit, Unaudited
from activity_core.temporal.client import TemporalClientProvider, is_unreachable
from activity_core.temporal.errors import TemporalUnavailable
from activity_core.temporal.schedules import schedule_id
from activity_core.uuid_text import uuid_or_none
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


class AutomationPauses:
    """Pause, resume and read an automation's pause, against the pool and Temporal."""

    def __init__(self, pool: asyncpg.Pool, temporal: TemporalClientProvider) -> None:
        self._pool = pool
        self._temporal = temporal

    async def pause(
        self,
        automation: str,
        *,
        operator: str,
        reason: str | None = None,
        audit: ActionAudit | None = None,
    ) -> AutomationState:
        """Raises QueueRefusal (not_found, state_conflict), DatabaseUnavailable or
        TemporalUnavailable."""
        reason = sanitize_error(reason)[:MAX_REASON_LENGTH] if reason is not None else None

        async def edit(
            conn: PoolConnectionProxy[asyncpg.Record], row: asyncpg.Record
        ) -> tuple[asyncpg.Record, bool]:
            if row["paused_by"] is not None:
                return row, False
            return await _one(conn.fetchrow(queries.PAUSE, row["id"], operator, reason)), True

        state = await self._change(
            automation,
            audit or Unaudited(),
            paused=True,
            edit=edit,
            note=lambda row: pause_note(row["paused_by"], row["pause_reason"]),
        )
        if state.changed:
            log.info("automation %s paused by operator %s", state.slug, operator)
        return state

    async def resume(
        self, automation: str, *, operator: str, audit: ActionAudit | None = None
    ) -> AutomationState:
        """Raises QueueRefusal (not_found, state_conflict), DatabaseUnavailable or
        TemporalUnavailable. An operator's pause of an automation whose definition has
        no schedule any more (synced without one while paused) is lifted in the database
        alone: there is no Schedule to unpause, and it fires manually again."""

        async def edit(
            conn: PoolConnectionProxy[asyncpg.Record], row: asyncpg.Record
        ) -> tuple[asyncpg.Record, bool]:
            if row["file_paused"] or row["removed"]:
                why = (
                    "was removed from the definition files"
                    if row["removed"]
                    else ("is paused by its definition file (paused: true)")
                )
                raise QueueRefusal(
                    RefusalCode.state_conflict,
                    f"automation {row['slug']!r} {why}; change the file and run sync-definitions",
                )
            if row["paused_by"] is None:
                return row, False
            return await _one(conn.fetchrow(queries.RESUME, row["id"])), True

        state = await self._change(
            automation,
            audit or Unaudited(),
            paused=False,
            edit=edit,
            note=lambda _row: f"activity-core: resumed by operator {operator}"[:MAX_NOTE_LENGTH],
        )
        if state.changed:
            log.info("automation %s resumed by operator %s", state.slug, operator)
        return state

    async def _change(
        self,
        automation: str,
        audit: ActionAudit,
        *,
        paused: bool,
        edit: Callable[
            [PoolConnectionProxy[asyncpg.Record], asyncpg.Record],
            Awaitable[tuple[asyncpg.Record, bool]],
        ],
        note: Callable[[asyncpg.Record], str],
    ) -> AutomationState:
        """One pause or resume (the module docstring): lock, change the row, write the
        audit entry, change the Schedule, commit. The entry is written before the
        Temporal call, so a failed write leaves the Schedule untouched; a failed Temporal
        call rolls the row and the entry back; a COMMIT that fails after the Schedule
        changed puts the Schedule back as it was (best effort: a later pause, resume or
        sync brings it in line with the row otherwise)."""
        undo: tuple[str, ScheduleDescription] | None = None
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                row = await self._locked(conn, automation, audit, resume=not paused)
                row, changed = await edit(conn, row)
                slug: str = row["slug"]
                if row["schedule_cron"] is None:  # only an operator's pause lifted (resume)
                    await audit.write(conn, {"slug": slug, "schedule": None}, repeated=not changed)
                    return _state(row, None, changed=changed)
                before = await self._describe(slug)
                intended: ScheduleStatus = (
                    "absent" if before is None else ("paused" if paused else "active")
                )
                await audit.write(conn, {"slug": slug, "schedule": intended}, repeated=not changed)
                described = await self._converge(
                    slug, before, paused=paused, note=note(row), force=paused and changed
                )
                if before is not None and described is not before:
                    undo = (slug, before)
        except Exception as exc:
            if undo is not None:
                await self._undo(*undo)
            if not _database_unavailable(exc):
                raise
            raise DatabaseUnavailable(type(exc).__name__) from exc
        return _state(row, described, changed=changed)

    async def _undo(self, slug: str, before: ScheduleDescription) -> None:
        """Put a Schedule back as `before` described it, after the row's change failed to
        commit; never raises (the failure being answered is the commit's)."""
        state = before.schedule.state
        try:
            await self._converge(slug, None, paused=state.paused, note=state.note or "", force=True)
        except Exception as exc:
            log.warning(
                "schedule %s could not be put back after a failed commit: %s; a later "
                "pause, resume or sync-definitions brings it in line",
                slug,
                type(exc).__name__,
            )

    async def state(self, automation: str) -> AutomationState:
        """The automation's pause and its schedule's next fire times; a Temporal that cannot
        be asked shows as `schedule: unreachable`, never as a failure of the read.

        Raises QueueRefusal (not_found) or DatabaseUnavailable."""
        try:
            row = await self._pool.fetchrow(
                queries.AUTOMATION, uuid_or_none(automation), automation
            )
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
        self,
        conn: PoolConnectionProxy[asyncpg.Record],
        automation: str,
        audit: ActionAudit,
        *,
        resume: bool,
    ) -> asyncpg.Record:
        await conn.execute(queries.LOCK_TIMEOUT)
        await conn.execute(queries.SCHEDULES_LOCK, SYNC_LOCK_NAMESPACE)
        row = await conn.fetchrow(
            queries.AUTOMATION_FOR_CHANGE, uuid_or_none(automation), automation
        )
        if row is None:
            raise QueueRefusal(RefusalCode.not_found, f"no automation {automation!r}")
        audit.resolved("automation", row["slug"])
        # A resume still lifts an operator's pause of a definition that lost its schedule
        # since: nothing else could (a fire refuses it while paused, a sync keeps it).
        if row["schedule_cron"] is None and not (resume and row["paused_by"] is not None):
            raise QueueRefusal(
                RefusalCode.state_conflict,
                f"automation {row['slug']!r} has no schedule (it is fired manually only); "
                "there is nothing to pause or resume",
            )
        return row

    async def _describe(self, slug: str) -> ScheduleDescription | None:
        client = await self._temporal.get()
        return await _describe(client, slug, self._temporal.address)

    async def _converge(
        self,
        slug: str,
        described: ScheduleDescription | None,
        *,
        paused: bool,
        note: str,
        force: bool,
    ) -> ScheduleDescription | None:
        """Bring the Schedule `described` (asked again when None) to `paused` (`force`:
        pause it again, so its note names this operator, when the file had paused it
        already); its description afterwards, `described` itself when nothing needed a
        change, or None when Temporal has no schedule for it (the next sync creates it as
        the row says)."""
        client = await self._temporal.get()
        address = self._temporal.address
        if described is None:
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
