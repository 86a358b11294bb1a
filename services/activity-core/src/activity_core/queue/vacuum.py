"""Vacuum ops_runs when its dead rows pile up, whether or not the server's autovacuum does.

Every claim and every close leaves a dead row version, and a claimed run's entry at the
head of the open-claim index stays there until a VACUUM removes it: until then each claim
reads past all of them. Measured with autovacuum off (bench/claim_throughput.py, phase (e)): a claim
read 43 buffers at the start of a 60 s run, 329 at its end, and 35 after one VACUUM.
Autovacuum visits a database once per `autovacuum_naptime` (a minute by default), can be
busy for hours on other tables (River's issue 59; Que's docs tell users to VACUUM the
queue table on a timer) or be off. Waiting for it lets the claim path slow down silently.

So each API process reads the table's dead-row count (pg_stat_user_tables, a cheap
lookup) every few seconds and, at or past a limit, runs VACUUM itself on a connection of
its own (queries.VACUUM_OPS_RUNS says why each option). A VACUUM that could not remove
most of them is not repeated at once: a transaction older than the dead rows holds them,
and vacuuming again changes nothing until it ends. The wait doubles (up to a ceiling) and
a warning names the cause. Nothing here ever stops the API: an unreachable database or a
missing schema is checked again later.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass

import asyncpg

from activity_core.db.errors import DATABASE_FAILURES
from activity_core.db.pool import session_untouched
from activity_core.queue import queries
from activity_core.queue.background import BackgroundTask
from activity_core.queue.metrics import QueueMetrics

__all__ = [
    "VACUUM_APPLICATION_NAME",
    "CheckOutcome",
    "QueueVacuum",
    "VacuumFacts",
    "next_wait",
    "start_notes",
    "vacuum_held",
]

log = logging.getLogger("activity_core.vacuum")

VACUUM_APPLICATION_NAME = "activity-core-vacuum"
# Seconds between two looks at the dead-row count.
CHECK_EVERY = 5.0
# The longest wait after VACUUMs that a long transaction made useless.
BACKOFF_MAX = 300.0
# SQLSTATE of "skipping vacuum of ... --- lock not available" (SKIP_LOCKED).
_LOCK_NOT_AVAILABLE = "55P03"


class CheckOutcome(enum.StrEnum):
    OFF = "off"  # the limit is 0
    NOT_READY = "not_ready"  # no database or no ops_runs yet
    NOT_PERMITTED = "not_permitted"  # this role may not VACUUM ops_runs
    BELOW_LIMIT = "below_limit"
    VACUUMED = "vacuumed"
    HELD = "held"  # vacuumed, but most dead rows are still needed by an older transaction
    BUSY = "busy"  # another VACUUM holds the table; it does the work


@dataclass(frozen=True)
class VacuumFacts:
    """What the server says about vacuuming ops_runs, read once when the schema exists."""

    server_autovacuum: bool
    track_counts: bool
    table_autovacuum: bool
    may_vacuum: bool


def start_notes(facts: VacuumFacts, dead_rows_limit: int) -> list[str]:
    """Warnings for the log at start: what the operator should know about upkeep."""
    notes: list[str] = []
    if not facts.track_counts:
        notes.append(
            "track_counts is off: neither autovacuum nor activity-core can see dead rows in "
            "ops_runs, and claims will slow down as they pile up"
        )
    if not facts.may_vacuum and dead_rows_limit > 0:
        notes.append(
            "this role may not VACUUM ops_runs (not its owner): dead rows are left to the "
            "server's autovacuum"
        )
    if not (facts.server_autovacuum and facts.table_autovacuum):
        where = "on the server" if not facts.server_autovacuum else "for ops_runs"
        if dead_rows_limit > 0 and facts.may_vacuum and facts.track_counts:
            notes.append(
                f"autovacuum is off {where}: activity-core vacuums ops_runs itself at "
                f"{dead_rows_limit} dead rows"
            )
        else:
            notes.append(
                f"autovacuum is off {where} and activity-core does not vacuum ops_runs: "
                "claims will slow down as dead rows pile up"
            )
    return notes


def vacuum_held(dead_before: int, dead_after: int) -> bool:
    """Whether a VACUUM was held back by an older transaction: it left (about) as many dead
    rows as it found. Rows that died while it ran are counted after it too, so a slow
    VACUUM of a busy table can leave many; only a held one leaves nearly all. (A hold that
    began during the last interval shows fully at the next VACUUM.)"""
    return dead_after * 10 >= dead_before * 9


def next_wait(outcome: CheckOutcome, previous: float, check_every: float, ceiling: float) -> float:
    """Seconds until the next check: doubling after a held VACUUM, else the check period."""
    if outcome is CheckOutcome.HELD:
        return min(max(previous * 2, check_every * 2), max(ceiling, check_every))
    return check_every


class QueueVacuum:
    """One per app instance: `start()` in the lifespan, `stop()` at its end.

    `check()` is one look (and, when due, one VACUUM); tests call it directly.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        *,
        dead_rows_limit: int,
        metrics: QueueMetrics,
        check_every: float = CHECK_EVERY,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self._pool = pool
        self._dsn = dsn
        self._limit = dead_rows_limit
        self._metrics = metrics
        self._check_every = check_every
        self._backoff_max = backoff_max
        self._facts: VacuumFacts | None = None
        self._task = BackgroundTask("ops-runs-vacuum", self._run)

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        wait = self._check_every
        while True:
            try:
                outcome = await self.check()
            except DATABASE_FAILURES as exc:
                # The queue's own requests report an outage; this loop just looks again.
                log.debug("vacuum check failed: %s", type(exc).__name__)
                outcome = CheckOutcome.NOT_READY
            except Exception:
                # A fault here must neither end the upkeep nor fill the log every few
                # seconds: say it, then wait as long as after a held VACUUM.
                log.exception("vacuum check failed")
                outcome = CheckOutcome.HELD
            if outcome in (CheckOutcome.OFF, CheckOutcome.NOT_PERMITTED):
                return
            wait = next_wait(outcome, wait, self._check_every, self._backoff_max)
            await asyncio.sleep(wait)

    async def check(self) -> CheckOutcome:
        if self._limit == 0:
            return CheckOutcome.OFF
        async with self._pool.acquire() as conn:
            session_untouched(conn)
            if self._facts is None:
                row = await conn.fetchrow(queries.VACUUM_FACTS)
                if row is None:
                    return CheckOutcome.NOT_READY
                self._facts = VacuumFacts(**dict(row))
                for note in start_notes(self._facts, self._limit):
                    log.warning(note)
            if not self._facts.may_vacuum:
                return CheckOutcome.NOT_PERMITTED
            dead = await conn.fetchval(queries.DEAD_ROWS)
        if dead is None:
            return CheckOutcome.NOT_READY
        self._metrics.dead_rows.set(dead)
        if dead < self._limit:
            return CheckOutcome.BELOW_LIMIT
        outcome = await self._vacuum(dead)
        self._metrics.vacuums.labels(outcome=outcome.value).inc()
        return outcome

    async def _vacuum(self, dead_before: int) -> CheckOutcome:
        started = time.perf_counter()
        # What the server says while it vacuums (asyncpg hands over WARNING and NOTICE).
        messages: list[asyncpg.PostgresLogMessage] = []
        conn = await asyncpg.connect(
            self._dsn, server_settings={"application_name": VACUUM_APPLICATION_NAME}
        )
        try:
            conn.add_log_listener(lambda _conn, message: messages.append(message))
            # No statement timeout: a first VACUUM of a large table may take a while, and
            # it only holds a lock that claims and closes do not conflict with.
            await conn.execute(queries.VACUUM_OPS_RUNS, timeout=None)
            dead_after = int(await conn.fetchval(queries.DEAD_ROWS) or 0)
        finally:
            await conn.close()
        elapsed = time.perf_counter() - started
        self._metrics.dead_rows.set(dead_after)
        if any(m.sqlstate == _LOCK_NOT_AVAILABLE for m in messages):
            log.info("ops_runs is being vacuumed already; leaving it to that VACUUM")
            return CheckOutcome.BUSY
        for message in messages:
            # e.g. "cutoff for removing and freezing tuples is far in the past"
            log.warning("VACUUM ops_runs: %s", message.message)
        if vacuum_held(dead_before, dead_after):
            log.warning(
                "VACUUM ops_runs removed few dead rows (%d before, %d after, %.2f s): an "
                "older open transaction still needs them (see pg_stat_activity.backend_xmin); "
                "claims slow down until it ends",
                dead_before,
                dead_after,
                elapsed,
            )
            return CheckOutcome.HELD
        log.info(
            "vacuumed ops_runs: %d dead rows before, %d after, %.2f s",
            dead_before,
            dead_after,
            elapsed,
        )
        return CheckOutcome.VACUUMED
