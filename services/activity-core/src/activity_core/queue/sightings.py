"""The last claim of each worker identity, recorded without slowing the claim.

Operators ask which workers are there and what they claim (`GET /ops/workers`, explain).
The claim is the queue's hot path, so it only writes a dict entry in this process
(`record`, no I/O, no lock: one event loop); a task of its own writes every identity
seen since its last write in one statement every FLUSH_SECONDS (`RECORD_SIGHTINGS`,
the later claim wins across processes). What is lost if a process dies: at most the
last FLUSH_SECONDS of its sightings, which the worker's next claim writes again.

A write that fails (the database is away) keeps its entries for the next one, unless a
newer claim of the same identity replaced them meanwhile, and waits longer each time
(up to MAX_BACKOFF_SECONDS); nothing the claim path does waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from activity_core.queue import queries

__all__ = ["FLUSH_SECONDS", "ClaimSightings", "Sighting"]

log = logging.getLogger("activity_core.queue.sightings")

FLUSH_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 60.0


@dataclass(frozen=True)
class Sighting:
    """One claim request as the workers view shows it."""

    at: float  # time.time() when the claim arrived
    labels: tuple[str, ...] | None  # None: the claim named no labels (any run)
    labels_mode: str
    limit: int

    @property
    def at_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.at, UTC)


class ClaimSightings:
    def __init__(self, pool: asyncpg.Pool, *, interval: float = FLUSH_SECONDS) -> None:
        self._pool = pool
        self._interval = interval
        self._seen: dict[str, Sighting] = {}
        self._task: asyncio.Task[None] | None = None

    def record(
        self, worker_id: str, labels: Sequence[str] | None, labels_mode: str, limit: int
    ) -> None:
        """A claim arrived (the claim path: a dict write, nothing else)."""
        self._seen[worker_id] = Sighting(
            time.time(), tuple(labels) if labels else None, labels_mode, limit
        )

    def pending(self) -> dict[str, Sighting]:
        """Sightings not written yet (a view in this process adds them to the table's)."""
        return dict(self._seen)

    async def flush(self) -> int:
        """Write what was seen since the last write; the number of identities written."""
        taken, self._seen = self._seen, {}
        if not taken:
            return 0
        try:
            async with self._pool.acquire() as conn:
                await conn.execute(
                    queries.RECORD_SIGHTINGS,
                    list(taken),
                    [s.at_datetime for s in taken.values()],
                    [
                        json.dumps(list(s.labels)) if s.labels is not None else None
                        for s in taken.values()
                    ],
                    [s.labels_mode for s in taken.values()],
                    [s.limit for s in taken.values()],
                )
        except BaseException:
            # keep them for the next write, unless a newer claim replaced one meanwhile
            for worker_id, sighting in taken.items():
                newer = self._seen.get(worker_id)
                if newer is None or newer.at < sighting.at:
                    self._seen[worker_id] = sighting
            raise
        return len(taken)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="claim-sightings")

    async def stop(self) -> None:
        """Stop the task, then write what is left (best effort: the database may be away)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.flush()
        except Exception as exc:
            log.warning("could not write the last worker sightings: %s", type(exc).__name__)

    async def _run(self) -> None:
        wait = self._interval
        while True:
            await asyncio.sleep(wait)
            try:
                await self.flush()
            except Exception as exc:
                wait = min(wait * 2, MAX_BACKOFF_SECONDS)
                log.warning(
                    "could not write worker sightings (%s); retrying in %.0f s",
                    type(exc).__name__,
                    wait,
                )
            else:
                wait = self._interval
