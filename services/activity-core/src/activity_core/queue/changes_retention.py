"""Retention of stored changes: ACTIVITY_CORE_CHANGES_RETENTION_DAYS after a run is terminal.

A bundle is up to ACTIVITY_CORE_CHANGES_MAX_BYTES and is read only by the change view
and publication, which an operator uses while the run is recent. Each API process
deletes, once an hour, the changes of runs terminal for longer than the retention
(changes/queries.DELETE_EXPIRED, a bounded batch at a time so that no statement holds
many rows' locks), like the queue's other upkeep (vacuum.py, run_ages.py). A run that is
not terminal keeps its changes whatever their age: its attempt may still close.

Replicas may sweep at once: a row deleted by one is simply not found by the other.
Nothing here ever stops the API: an outage or a missing schema is tried again later.
"""

from __future__ import annotations

import logging

import asyncpg

from activity_core.changes import queries as changes_queries
from activity_core.db.pool import session_untouched
from activity_core.queue.background import BackgroundTask, repeat
from activity_core.queue.metrics import QueueMetrics

__all__ = ["SWEEP_BATCH", "SWEEP_EVERY", "ChangesRetention"]

log = logging.getLogger("activity_core.changes_retention")

SWEEP_EVERY = 3600.0
# Rows per DELETE: a few hundred bundles of up to 8 MiB is as much as one statement should
# free at a time.
SWEEP_BATCH = 200


class ChangesRetention:
    """One per app instance: `start()` in the lifespan, `stop()` at its end; `sweep()` is
    one pass (tests call it directly)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        retention_days: int,
        metrics: QueueMetrics,
        every: float = SWEEP_EVERY,
        batch: int = SWEEP_BATCH,
    ) -> None:
        self._pool = pool
        self._days = retention_days
        self._metrics = metrics
        self._every = every
        self._batch = batch
        self._task = BackgroundTask("ops-run-changes-retention", self._repeat)

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def sweep(self) -> int:
        """Delete every expired row, a batch per statement; answers how many."""
        deleted = 0
        async with self._pool.acquire() as conn:
            session_untouched(conn)
            while True:
                status = await conn.execute(changes_queries.DELETE_EXPIRED, self._days, self._batch)
                count = int(status.split()[-1])
                deleted += count
                if count < self._batch:
                    break
        if deleted:
            self._metrics.changes_expired.inc(deleted)
            log.info(
                "deleted the stored changes of %d attempts of runs terminal for more than %d days",
                deleted,
                self._days,
            )
        return deleted

    async def _repeat(self) -> None:
        await repeat(self.sweep, every=self._every, failed="changes retention not swept", log=log)
