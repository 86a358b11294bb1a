"""The age of the oldest unfinished run, for `ops_runs_oldest_age_seconds{state}`.

A queue whose counts look fine can still hold a run nobody takes (its labels match no
worker, its profile is unknown to every catalogue) or one that never finishes; only its
age shows that. Each API process reads the age of the oldest open and the oldest claimed
run every few seconds (one statement, queries.OLDEST_UNFINISHED) into the gauge, 0 for a
state without runs. The reading is queue-wide and the same on every replica: alerts and
dashboards take the max across replicas (deploy/README.md, "Metrics").

Nothing here ever stops the API: an unreachable database or a missing schema leaves the
last reading in place and is tried again at the next look.
"""

from __future__ import annotations

import logging

import asyncpg

from activity_core.db.pool import session_untouched
from activity_core.queue import queries
from activity_core.queue.background import BackgroundTask, repeat
from activity_core.queue.metrics import QueueMetrics

__all__ = ["REFRESH_EVERY", "RunAges"]

log = logging.getLogger("activity_core.run_ages")

# Seconds between two readings: well under any alert's threshold, and one cheap statement.
REFRESH_EVERY = 15.0


class RunAges:
    """One per app instance: `start()` in the lifespan, `stop()` at its end; `refresh()` is
    one reading (tests call it directly)."""

    def __init__(
        self, pool: asyncpg.Pool, *, metrics: QueueMetrics, every: float = REFRESH_EVERY
    ) -> None:
        self._pool = pool
        self._metrics = metrics
        self._every = every
        self._task = BackgroundTask("ops-runs-ages", self._repeat)

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def refresh(self) -> dict[str, float]:
        """Read the ages into the gauge; answers them by state."""
        async with self._pool.acquire() as conn:
            session_untouched(conn)
            rows = await conn.fetch(queries.OLDEST_UNFINISHED)
        ages = {row["state"]: max(0.0, row["age_seconds"] or 0.0) for row in rows}
        for state, age in ages.items():
            self._metrics.oldest_unfinished.labels(state=state).set(age)
        return ages

    async def _repeat(self) -> None:
        await repeat(self.refresh, every=self._every, failed="run ages not read", log=log)
