"""`publish_pending`: the IssueSink writes a fire owes, after its ops runs are committed.

`emit_tasks` leaves each write the sink is owed as an audit row with ``sink_status``
``pending`` and the task as emitted (``sink_payload``). This unit of work sends them, oldest
first, each with the ops run's idempotency key as the ``Idempotency-Key`` header, and
records each outcome in a statement of its own:

- accepted: ``written``, with the sink's reference; the payload is dropped;
- refused (a conclusive 4xx): ``failed`` with the refusal; sending it again would be
  refused again, so the other writes go on;
- the sink is down: the write stays pending with what the try met, the remaining writes
  are left for the next try (the sink is down for them too), and SinkUnavailable asks the
  caller to try again later.

The writes of a fire are those of every key its audit rows name, so a replayed or retried
fire (whose items are ``duplicate``) sends again what its original left pending or failed.

One try sends a write (migration 0010): a try takes the fire's writes with a token of its
own and, before every attempt at one (the sink's own retries included), asks whether it is
still owed and still its own. A later try takes them over, and `give_up` takes them from
every try; the earlier try then withdraws the write without sending it. That matters
because Temporal ending an attempt (the retry window's timeout) does not stop the attempt
running on its worker: without the question, a try timed out while State Hub was down
sent its writes when State Hub came back, as did the operator's retry-fire. Only a request
already in flight when the write is taken over can still reach the sink a second time;
the sink is idempotent on the key and records the task once.

`give_up` is the end of the retry window: what is still pending becomes ``failed``, with
the last reason a try recorded.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import asyncpg

from activity_core.db.unavailable import is_unavailable
from activity_core.emission import queries
from activity_core.emission.errors import (
    EmissionError,
    EmissionUnavailable,
    IssueSinkError,
    SinkWriteWithdrawn,
)
from activity_core.emission.sink import IssueSink, SinkTask, StillOwed
from ops_evidence import sanitize_error

__all__ = [
    "SinkTotals",
    "SinkUnavailable",
    "give_up",
    "publish_pending",
    "sink_totals",
    "writes_owed",
]

log = logging.getLogger("activity_core.emission")


class SinkUnavailable(EmissionError):
    """The IssueSink is down: writes are left pending; try again later."""


@dataclass(frozen=True, slots=True)
class SinkTotals:
    """A fire's sink writes after its sink step: accepted, and failed for good."""

    written: int
    failed: int


async def publish_pending(
    pool: asyncpg.Pool, sink: IssueSink, *, activity_run_id: uuid.UUID
) -> SinkTotals:
    """Send the fire's pending and failed sink writes (see the module docstring).

    Raises SinkUnavailable (some writes still pending) or EmissionUnavailable (the
    database is down; what was recorded before stays recorded).
    """
    sender = uuid.uuid4()
    try:
        rows = await pool.fetch(queries.SINK_TAKE_WRITES_OF_FIRE, activity_run_id, sender)
        for row in rows:
            task = SinkTask.from_payload(row["sink_payload"])
            try:
                ref = await sink.publish(
                    task, still_owed=_still_owed(pool, audit_row=row["id"], sender=sender)
                )
            except SinkWriteWithdrawn:
                log.info(
                    "sink write withdrawn: given up or taken over by another try",
                    extra={"key": row["idempotency_key"]},
                )
                continue
            except IssueSinkError as exc:
                reason = sanitize_error(str(exc))
                if exc.conclusive:
                    await pool.execute(queries.SINK_REFUSED, row["id"], reason)
                    log.warning(
                        "sink refused a task: %s",
                        reason,
                        extra={"key": row["idempotency_key"]},
                    )
                    continue
                await pool.execute(queries.SINK_NOT_YET, row["id"], reason, sender)
                raise SinkUnavailable(reason) from exc
            await pool.execute(queries.SINK_WRITTEN, row["id"], ref)
        return await sink_totals(pool, activity_run_id=activity_run_id)
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        raise EmissionUnavailable(f"database unavailable: {type(exc).__name__}") from exc


def _still_owed(pool: asyncpg.Pool, *, audit_row: int, sender: uuid.UUID) -> StillOwed:
    async def still_owed() -> bool:
        return bool(await pool.fetchval(queries.SINK_STILL_OWED, audit_row, sender))

    return still_owed


async def give_up(pool: asyncpg.Pool, *, activity_run_id: uuid.UUID, reason: str) -> SinkTotals:
    """The retry window is over: the fire's pending writes fail, with the last reason a
    try recorded (else ``reason``). Raises EmissionUnavailable."""
    try:
        await pool.execute(queries.SINK_GIVE_UP, activity_run_id, sanitize_error(reason))
        return await sink_totals(pool, activity_run_id=activity_run_id)
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        raise EmissionUnavailable(f"database unavailable: {type(exc).__name__}") from exc


async def writes_owed(pool: asyncpg.Pool, *, activity_run_id: uuid.UUID) -> int:
    """How many sink writes the fire owes (pending or failed, of the keys its audit rows
    name): what `publish_pending` would send. Raises EmissionUnavailable."""
    try:
        count = await pool.fetchval(queries.FIRE_SINK_WRITES_LEFT, activity_run_id)
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        raise EmissionUnavailable(f"database unavailable: {type(exc).__name__}") from exc
    return int(count)


async def sink_totals(pool: asyncpg.Pool, *, activity_run_id: uuid.UUID) -> SinkTotals:
    row = await pool.fetchrow(queries.SINK_TOTALS, activity_run_id)
    assert row is not None  # an aggregate always yields one row
    return SinkTotals(written=int(row["written"]), failed=int(row["failed"]))
