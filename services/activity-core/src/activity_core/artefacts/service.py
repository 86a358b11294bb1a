"""Run artefacts of an automation: its fires, newest first, each with the ops runs it
produced, their compact evidence and the files they delivered.

The join rules are in queries.FIRE_OPS_RUNS: the fire's run id (exactly, or contained in
the ops run's triggering event id), the per-fire triggering event id it recorded, else
the fire's time window. While a fire is unfinished its window is OPEN_FIRE_WINDOW_SECONDS
from its start: long enough for emission (which happens inside the fire, retries
included) and short enough that a crashed fire without a finished_at does not collect
every later run; a window never reaches past the next fire's start either way.

Each view is one read-only REPEATABLE READ transaction. Driver failures become
DatabaseUnavailable, unknown automations and fires a not_found refusal.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.artefacts import queries
from activity_core.artefacts.models import (
    AutomationIndex,
    AutomationRef,
    AutomationSummary,
    Fire,
    FireDetail,
    FireOpsRun,
    FirePage,
    LastFire,
    Schedule,
    SinkWrites,
)
from activity_core.artefacts.projection import project_ops_run
from activity_core.db.keyset import encode_cursor
from activity_core.db.unavailable import pooled
from activity_core.queue.errors import QueueRefusal, query_cursor
from activity_core.uuid_text import uuid_or_none
from ops_contracts import RefusalCode, RunState
from ops_evidence import sanitize_error

__all__ = ["MAX_OPS_RUNS_PER_FIRE", "MAX_PAGE_SIZE", "OPEN_FIRE_WINDOW_SECONDS", "ArtefactService"]

OPEN_FIRE_WINDOW_SECONDS = 900
MAX_OPS_RUNS_PER_FIRE = 200
MAX_PAGE_SIZE = 100


def _automation(row: asyncpg.Record) -> dict[str, Any]:
    schedule = (
        Schedule(cron=row["schedule_cron"], timezone=row["schedule_timezone"])
        if row["schedule_cron"]
        else None
    )
    return {
        "id": row["id"],
        "slug": row["slug"],
        "title": row["title"],
        "schedule": schedule,
        "paused": row["paused"],
    }


def _error_text(value: object) -> str | None:
    return sanitize_error(value) if value is not None else None


def _sink_writes(rows: Sequence[asyncpg.Record]) -> SinkWrites:
    counts = {row["state"]: int(row["n"]) for row in rows}
    errors = [row["error"] for row in rows if row["error"] is not None]
    return SinkWrites(
        written=counts.get("written", 0),
        pending=counts.get("pending", 0),
        failed=counts.get("failed", 0),
        error=_error_text(errors[0]) if errors else None,
    )


def _summary(row: asyncpg.Record) -> AutomationSummary:
    counts = row["queue_counts"] if isinstance(row["queue_counts"], dict) else {}
    last = (
        LastFire(
            id=row["last_id"],
            run_id=row["last_run_id"],
            status=row["last_status"],
            started_at=row["last_started_at"],
            finished_at=row["last_finished_at"],
            scheduled_for=row["last_scheduled_for"],
            error=_error_text(row["last_error"]),
        )
        if row["last_run_id"] is not None
        else None
    )
    return AutomationSummary(
        **_automation(row),
        last_fire=last,
        queue_counts={state: int(counts.get(state.value, 0)) for state in RunState},
    )


class ArtefactService:
    def __init__(self, pool: asyncpg.Pool, *, forgejo_web_base: str) -> None:
        self._pool = pool
        self._forgejo_web_base = forgejo_web_base

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        async with (
            pooled(self._pool) as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield conn

    async def automations(self) -> AutomationIndex:
        async with self._snapshot() as conn:
            rows = await conn.fetch(queries.AUTOMATIONS)
        return AutomationIndex(automations=[_summary(row) for row in rows])

    async def fires(
        self, automation: str, *, limit: int = 20, cursor: str | None = None
    ) -> FirePage:
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        after = query_cursor(cursor) if cursor is not None else (None, None)
        async with self._snapshot() as conn:
            ref = await self._definition(conn, automation)
            rows = await conn.fetch(queries.FIRES_PAGE, ref.id, after[0], after[1], limit + 1)
            page = rows[:limit]
            fires = await self._join(conn, ref.id, page)
        next_cursor = (
            encode_cursor(page[-1]["started_at"], page[-1]["id"]) if len(rows) > limit else None
        )
        return FirePage(automation=ref, runs=fires, next_cursor=next_cursor)

    async def fire(self, automation: str, run_ref: str) -> FireDetail:
        async with self._snapshot() as conn:
            ref = await self._definition(conn, automation)
            row = await conn.fetchrow(queries.FIRE, ref.id, run_ref, uuid_or_none(run_ref))
            if row is None:
                raise QueueRefusal(
                    RefusalCode.not_found, f"automation {ref.slug} has no run {run_ref}"
                )
            (fire,) = await self._join(conn, ref.id, [row])
        return FireDetail(automation=ref, run=fire)

    async def _definition(
        self, conn: PoolConnectionProxy[asyncpg.Record], automation: str
    ) -> AutomationRef:
        row = await conn.fetchrow(queries.DEFINITION, uuid_or_none(automation), automation)
        if row is None:
            raise QueueRefusal(RefusalCode.not_found, f"no automation {automation}")
        return AutomationRef(**_automation(row))

    async def _join(
        self,
        conn: PoolConnectionProxy[asyncpg.Record],
        definition_id: uuid.UUID,
        fires: Sequence[asyncpg.Record],
    ) -> list[Fire]:
        if not fires:
            return []
        rows = await conn.fetch(
            queries.FIRE_OPS_RUNS,
            definition_id,
            [fire["id"] for fire in fires],
            OPEN_FIRE_WINDOW_SECONDS,
            MAX_OPS_RUNS_PER_FIRE + 1,
        )
        sink_rows = await conn.fetch(queries.FIRE_SINK_WRITES, [fire["id"] for fire in fires])
        sink_by_fire: dict[uuid.UUID, list[asyncpg.Record]] = defaultdict(list)
        for row in sink_rows:
            sink_by_fire[row["fire_id"]].append(row)
        now = datetime.now(UTC)
        by_fire: dict[uuid.UUID, list[FireOpsRun]] = defaultdict(list)
        for row in rows:
            by_fire[row["fire_id"]].append(
                project_ops_run(
                    dict(row),
                    matched_by=row["matched_by"],
                    forgejo_base=self._forgejo_web_base,
                    now=now,
                )
            )
        out = []
        for fire in fires:
            ops_runs = by_fire.get(fire["id"], [])
            shown = ops_runs[:MAX_OPS_RUNS_PER_FIRE]
            out.append(
                Fire(
                    id=fire["id"],
                    run_id=fire["run_id"],
                    workflow_id=fire["workflow_id"],
                    trigger_key=fire["trigger_key"],
                    triggering_event_id=fire["triggering_event_id"],
                    scheduled_for=fire["scheduled_for"],
                    status=fire["status"],
                    error=_error_text(fire["error"]),
                    retry_of=fire["retry_of"],
                    emitted_count=fire["emitted_count"],
                    sink_writes=_sink_writes(sink_by_fire.get(fire["id"], [])),
                    started_at=fire["started_at"],
                    finished_at=fire["finished_at"],
                    ops_runs=shown,
                    ops_runs_truncated=len(ops_runs) > MAX_OPS_RUNS_PER_FIRE,
                    artifacts=[artifact for run in shown for artifact in run.artifacts],
                )
            )
        return out
