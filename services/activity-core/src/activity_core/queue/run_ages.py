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

import asyncio
import contextlib
import logging

import asyncpg

from activity_core.db.errors import DATABASE_FAILURES
from activity_core.db.pool import session_untouched
from activity_core.queue import queries
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
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ops-runs-ages")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def refresh(self) -> dict[str, float]:
        """Read the ages into the gauge; answers them by state."""
        async with self._pool.acquire() as conn:
            session_untouched(conn)
            rows = await conn.fetch(queries.OLDEST_UNFINISHED)
        ages = {row["state"]: max(0.0, row["age_seconds"] or 0.0) for row in rows}
        for state, age in ages.items():
            self._metrics.oldest_unfinished.labels(state=state).set(age)
        return ages

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except DATABASE_FAILURES as exc:
                # The queue's own requests report an outage; this loop just looks again.
                log.debug("run ages not read: %s", type(exc).__name__)
            except Exception:
                log.exception("run ages not read")
            await asyncio.sleep(self._every)
