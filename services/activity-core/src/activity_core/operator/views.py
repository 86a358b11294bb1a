"""What an operator reads: the runs summary, the dead letter, the workers, explain.

Each view is one read-only REPEATABLE READ transaction (connection.snapshot), so its
statements see one moment. The decisions they answer with are pure (workers.py,
explain.py); this module only fetches their facts.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.artefacts.projection import compact_evidence_of
from activity_core.db.keyset import encode_cursor
from activity_core.operator import queries
from activity_core.operator.connection import snapshot
from activity_core.operator.explain import (
    AutomationFacts,
    ExplainFacts,
    HeldRun,
    Reason,
    RunFacts,
    WorkerFacts,
    explain,
)
from activity_core.operator.workers import worker_state
from activity_core.queue import queries as queue_queries
from activity_core.queue.errors import QueueRefusal, query_cursor
from activity_core.queue.service import definition_id_of
from activity_core.queue.sightings import ClaimSightings
from ops_contracts import RefusalCode, RunState
from ops_evidence import sanitize_error

__all__ = ["DEFAULT_SUMMARY_WINDOW", "MAX_WORKERS_SHOWN", "OperatorViews"]

# Terminal counts of the summary cover runs created this long ago at most, by default.
DEFAULT_SUMMARY_WINDOW = timedelta(hours=24)
MAX_WORKERS_SHOWN = 500
MAX_DEAD_LETTER_PAGE = 200


class OperatorViews:
    def __init__(
        self, pool: asyncpg.Pool, *, max_attempts: int, sightings: ClaimSightings | None = None
    ) -> None:
        self._pool = pool
        self._max_attempts = max_attempts
        self._sightings = sightings

    # -- summary -----------------------------------------------------------------------------

    async def summary(self, since: datetime | None = None) -> dict[str, Any]:
        async with snapshot(self._pool) as conn:
            now = await conn.fetchval("SELECT now()")
            window = since if since is not None else now - DEFAULT_SUMMARY_WINDOW
            row = await conn.fetchrow(queries.SUMMARY, window)
        assert row is not None
        oldest = None
        if row["oldest_open_id"] is not None:
            created = row["oldest_open_created_at"]
            oldest = {
                "id": row["oldest_open_id"],
                "created_at": created,
                "age_seconds": max(0.0, (row["as_of"] - created).total_seconds()),
            }
        return {
            "as_of": row["as_of"],
            "open": row["open"],
            "claimed": row["claimed"],
            "stalled": row["stalled"],
            "oldest_open": oldest,
            "terminal_since": window,
            "succeeded": row["succeeded"],
            "failed": row["failed"],
            "expired": row["expired"],
        }

    # -- dead letter -------------------------------------------------------------------------

    async def dead_letter(
        self,
        *,
        automation: str | None = None,
        requeued: bool | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> tuple[list[dict[str, Any]], str | None]:
        limit = max(1, min(limit, MAX_DEAD_LETTER_PAGE))
        after = query_cursor(cursor) if cursor is not None else (None, None)
        async with snapshot(self._pool) as conn:
            definition_id = (
                await definition_id_of(conn, automation) if automation is not None else None
            )
            rows = await conn.fetch(
                queries.DEAD_LETTER_PAGE, definition_id, after[0], after[1], limit + 1, requeued
            )
        page = rows[:limit]
        next_cursor = (
            encode_cursor(page[-1]["created_at"], page[-1]["id"]) if len(rows) > limit else None
        )
        return [_dead_letter_run(row) for row in page], next_cursor

    # -- workers -----------------------------------------------------------------------------

    async def workers(self) -> list[dict[str, Any]]:
        async with snapshot(self._pool) as conn:
            now, facts = await self._worker_facts(conn)
        return [
            {
                "worker_id": w.worker_id,
                "last_claim_at": w.last_claim_at,
                "labels": list(w.labels) if w.labels is not None else None,
                "labels_mode": w.labels_mode,
                "limit": w.limit,
                "holding": [held.run_id for held in w.holding],
                "state": worker_state(w.last_claim_at, holds_live_lease=w.live_held > 0, now=now),
            }
            for w in facts
        ]

    async def _worker_facts(
        self, conn: PoolConnectionProxy[asyncpg.Record]
    ) -> tuple[datetime, list[WorkerFacts]]:
        """Every identity the claims recorded (with this process's sightings not written
        yet) or that holds a run, latest claim first; and the database's now."""
        now: datetime = await conn.fetchval("SELECT now()")
        seen = {
            row["worker_id"]: (
                row["last_claim_at"],
                tuple(row["labels"]) if row["labels"] is not None else None,
                row["labels_mode"],
                row["claim_limit"],
            )
            for row in await conn.fetch(queries.WORKERS_SEEN, MAX_WORKERS_SHOWN)
        }
        if self._sightings is not None:
            for worker_id, sighting in self._sightings.pending().items():
                recorded = seen.get(worker_id)
                if recorded is None or recorded[0] < sighting.at_datetime:
                    seen[worker_id] = (
                        sighting.at_datetime,
                        sighting.labels,
                        sighting.labels_mode,
                        sighting.limit,
                    )
        held: dict[str, list[HeldRun]] = defaultdict(list)
        for row in await conn.fetch(queries.RUNS_HELD):
            held[row["claim_owner"]].append(
                HeldRun(row["id"], row["lease_until"], bool(row["lease_live"]))
            )
        facts = [
            WorkerFacts(worker_id, at, labels, mode, limit, tuple(held.get(worker_id, ())))
            for worker_id, (at, labels, mode, limit) in seen.items()
        ]
        facts += [
            WorkerFacts(worker_id, None, None, None, None, tuple(runs))
            for worker_id, runs in held.items()
            if worker_id not in seen
        ]
        epoch = datetime.min.replace(tzinfo=UTC)
        facts.sort(key=lambda w: (-(w.last_claim_at or epoch).timestamp(), w.worker_id))
        return now, facts[:MAX_WORKERS_SHOWN]

    # -- explain -----------------------------------------------------------------------------

    async def explain(self, run_id: uuid.UUID) -> tuple[RunState, list[Reason]]:
        async with snapshot(self._pool) as conn:
            row = await conn.fetchrow(queue_queries.GET_RUN, run_id)
            if row is None:
                raise QueueRefusal(RefusalCode.not_found, "no ops run with this id")
            now, workers = await self._worker_facts(conn)
            ahead = None
            if row["state"] == RunState.open:
                ahead = await conn.fetchval(queries.OPEN_AHEAD, run_id)
            definition = await conn.fetchrow(
                queries.DEFINITION_OF_RUN, row["activity_definition_id"]
            )
        facts = ExplainFacts(
            run=_run_facts(row),
            now=now,
            max_attempts=self._max_attempts,
            open_ahead=ahead,
            workers=tuple(workers),
            automation=(
                AutomationFacts(definition["slug"], definition["paused"], definition["removed"])
                if definition is not None
                else None
            ),
        )
        return facts.run.state, explain(facts)


def _run_facts(row: asyncpg.Record) -> RunFacts:
    labels = row["labels"] if isinstance(row["labels"], list) else []
    return RunFacts(
        id=row["id"],
        state=RunState(row["state"]),
        labels=tuple(label for label in labels if isinstance(label, str)),
        priority=row["priority"],
        attempt=row["attempt"],
        claim_owner=row["claim_owner"],
        lease_until=row["lease_until"],
        last_error=sanitize_error(row["last_error"]) if row["last_error"] is not None else None,
        cancelled_by=row["cancelled_by"],
        requeued_from=row["requeued_from"],
        requeued_as=tuple(row["requeued_as"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _dead_letter_run(row: asyncpg.Record) -> dict[str, Any]:
    labels = row["labels"] if isinstance(row["labels"], list) else []
    return {
        "id": row["id"],
        "activity_definition_id": row["activity_definition_id"],
        "automation": row["automation"],
        "title": row["title"],
        "target_repo": row["target_repo"],
        "labels": [label for label in labels if isinstance(label, str)],
        "priority": row["priority"],
        "state": row["state"],
        "attempt": row["attempt"],
        "claim_owner": row["claim_owner"],
        "last_error": sanitize_error(row["last_error"]) if row["last_error"] is not None else None,
        "cancelled_by": row["cancelled_by"],
        "execution_evidence": compact_evidence_of(row["result"]).model_dump(),
        "requeued_from": row["requeued_from"],
        "requeued_as": list(row["requeued_as"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }
