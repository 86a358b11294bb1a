"""Sync validated definitions into the database, then make Temporal's schedules match.

One transaction, serialized against concurrent syncs: insert new definitions, update the
ones whose content digest (or pause state) changed, leave unchanged ones alone, and retire
the ones whose file is no longer in the synced set. The paths given to `sync-definitions`
are the complete set: a stored definition that is not among them is *retired*: paused,
stamped `removed_at`, never deleted, because ops_runs, activity_runs and the audit log
reference it. A file that comes back un-retires its definition.

Only after the commit are schedules applied, through the `ScheduleApplier` protocol, with
every current spec and every retired slug. The applier is idempotent and converges, so if
it fails after the commit, re-running the sync finishes the job; the database never claims
a definition that a failed validation refused.

An operator's pause (`POST /ops/automations/{id}/pause`, temporal/pause.py) outlives every
sync: the row stays `paused` while `paused_by` is set, and its spec goes to the applier as
paused, so a changed cron is applied to a schedule that stays paused; only the operator's
resume lifts it. The sync holds the schedules lock (queries.SCHEDULES_LOCK) from before it
reads the definitions until the applier is done, and a pause or resume takes the same lock,
so neither can land between the other's database write and its schedule change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.definitions import queries
from activity_core.definitions.model import ActivityDefinitionSpec

__all__ = ["ScheduleApplier", "ScheduleApplyError", "SyncReport", "sync_definitions"]


class ScheduleApplier(Protocol):
    """Makes the scheduler match the definitions (implemented in ``temporal/schedules.py``).

    ``specs`` are all current definitions: create or update the schedule of each that has
    one (paused when ``spec.paused``), remove or pause the schedule of one that no longer
    has a ``schedule``. ``removed`` are slugs of retired definitions: pause their schedules.
    Must be idempotent: a sync calls it with the full set every time.
    """

    async def apply(
        self, specs: Sequence[ActivityDefinitionSpec], *, removed: Sequence[str]
    ) -> None: ...


class ScheduleApplyError(Exception):
    """The definitions were stored, but applying the schedules failed; re-run the sync."""


@dataclass(frozen=True, slots=True)
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    # retired by this sync (their file is gone)
    paused: list[str] = field(default_factory=list)
    # every retired slug handed to the schedule applier, including earlier retirements
    removed: list[str] = field(default_factory=list)
    # paused by an operator: handed to the applier as paused whatever the file says
    held: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"created {len(self.created)}, updated {len(self.updated)}, "
            f"unchanged {len(self.unchanged)}, paused {len(self.paused)}"
        )


def _row_values(spec: ActivityDefinitionSpec) -> tuple[object, ...]:
    schedule = spec.schedule
    return (
        spec.uuid,
        spec.id,
        spec.title,
        spec.stored(),
        schedule.cron if schedule else None,
        schedule.timezone if schedule else None,
        spec.paused,
        spec.content_digest(),
    )


async def store_definitions(
    conn: asyncpg.Connection | PoolConnectionProxy[asyncpg.Record],
    specs: Sequence[ActivityDefinitionSpec],
) -> SyncReport:
    """The database half of a sync; the caller owns the transaction."""
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("definition ids must be unique; validate the set first")
    await conn.execute(queries.SYNC_LOCK, queries.SYNC_LOCK_NAMESPACE)
    stored = {row["slug"]: row for row in await conn.fetch(queries.DEFINITIONS_FOR_SYNC)}
    report = SyncReport()
    for spec in specs:
        row = stored.get(spec.id)
        if row is None:
            await conn.execute(queries.INSERT_DEFINITION, *_row_values(spec))
            report.created.append(spec.id)
            continue
        held = row["paused_by"] is not None
        if held:
            report.held.append(spec.id)
        if (
            row["content_digest"] != spec.content_digest()
            or row["paused"] != (spec.paused or held)
            or row["removed_at"] is not None
        ):
            values = _row_values(spec)
            await conn.execute(queries.UPDATE_DEFINITION, row["id"], *values[1:])
            report.updated.append(spec.id)
        else:
            report.unchanged.append(spec.id)
    current = {spec.id for spec in specs}
    for slug, row in stored.items():
        if slug in current:
            continue
        if row["removed_at"] is None:
            await conn.execute(queries.RETIRE_DEFINITION, row["id"])
            report.paused.append(slug)
        report.removed.append(slug)
    return report


async def sync_definitions(
    pool: asyncpg.Pool,
    specs: Sequence[ActivityDefinitionSpec],
    schedules: ScheduleApplier,
) -> SyncReport:
    """Upsert ``specs`` (already validated, unique ids) in one transaction, then apply
    their schedules, an operator's pause kept. Raises ScheduleApplyError if only the
    second half failed."""
    async with pool.acquire() as conn:
        await conn.execute(queries.SCHEDULES_LOCK, queries.SYNC_LOCK_NAMESPACE)
        try:
            async with conn.transaction():
                report = await store_definitions(conn, specs)
            held = set(report.held)
            applied = [
                spec.model_copy(update={"paused": True}) if spec.id in held else spec
                for spec in specs
            ]
            try:
                await schedules.apply(applied, removed=report.removed)
            except Exception as exc:  # any failure of the scheduler means the same to the caller
                raise ScheduleApplyError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            # (the pool's reset on release unlocks too, should this statement fail)
            await conn.execute(queries.SCHEDULES_UNLOCK, queries.SYNC_LOCK_NAMESPACE)
    return report
