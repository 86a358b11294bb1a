"""When PostgreSQL is not there: which driver failures mean it, what they become, and when
a unit of work may run again. The one place for all three.

**What counts** (`is_unavailable`): a failure that says nothing about the request, only
that the database gave no answer: the connection was refused, reset, timed out or found
closed (OSError, asyncio.TimeoutError, asyncpg's 08xxx PostgresConnectionError including
ConnectionDoesNotExistError, and InterfaceError "connection is closed" / "pool is
closing"); the server ended the session or refuses new ones (57P01 AdminShutdownError on
`pg_terminate_backend` or a fast shutdown, 57P02 CrashShutdownError, 57P03
CannotConnectNowError while it starts or stops, 57P04, 57P05 idle session timeout, 25P03
idle-in-transaction timeout, 57014 a cancelled statement); or it has no room (53xxx:
TooManyConnectionsError, out of memory, disk full). Another InterfaceError (a parameter
the driver cannot encode, a connection used after its release) is a bug and stays one.

One more, found by killing an idle pooled connection: the server's FATAL arrives while the
connection is idle, asyncpg's protocol parks in its error state, and until it has read the
end of the stream the pool still hands the connection out. The next statement then fails
with InternalClientError "cannot switch to state …; another operation (2) is in
progress", raised before anything is written. It counts as lost and as never sent, and
the unit closes that connection, so the pool does not hand it out again.

**What it becomes**: DatabaseUnavailable, which the HTTP edge answers 503 `unavailable`
with Retry-After (http/error_handlers.py), the UI its 503 page, a Temporal activity a
retryable failure.

**Running again** (`run_unit`): a unit of work runs at most twice, and a second time only
when its first run cannot have changed anything:

- `Unit.READ` (statements that change nothing): after any such failure but a timeout or a
  cancelled statement (which would only wait as long again);
- `Unit.TRANSACTION` (one transaction, which run_unit opens and commits): when the
  connection was lost before COMMIT was sent, for PostgreSQL rolls back a transaction
  whose session ends; never when COMMIT itself got no answer;
- `Unit.STATEMENTS` (autocommit statements, each of which commits on its own, every one
  but the last safe to repeat): only when the failing statement was never sent (the
  connection was found closed before it, or none could be acquired).

A statement that was sent and got no answer may have committed: the server can commit and
then be terminated before it answers (a `pg_terminate_backend` during a synchronous
replication wait reports FATAL after the local commit). So a claim or a close in that
state is never repeated here; its caller gets 503. A claim repeated after it committed
would lease a second set of runs to a worker that never learns of the first; the worker's
own retry meets the queue's repeat rules instead (a repeated terminal close reconciles;
the runs of a lost claim are reclaimed when their lease ends).

A failure while the pool takes the connection back, after the unit finished, changes
nothing the unit did: its result stands (the pool discards that connection).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from enum import Enum
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import asyncpg

from activity_core.db.pool import session_untouched

if TYPE_CHECKING:  # PoolConnectionProxy is generic only in the stubs
    from asyncpg.pool import PoolConnectionProxy

    Connection: TypeAlias = PoolConnectionProxy[asyncpg.Record]

__all__ = [
    "DatabaseUnavailable",
    "Step",
    "Unit",
    "is_unavailable",
    "may_run_again",
    "pooled",
    "run_unit",
    "unavailable_on_loss",
]

log = logging.getLogger("activity_core.db")

T = TypeVar("T")


class DatabaseUnavailable(Exception):
    """PostgreSQL could not be reached or answered with a connection-level failure."""


# The server ended the session, refuses new ones, or has no room for this one.
_SERVER_GONE: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, broken pipe, DNS, and TimeoutError (asyncio's too)
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.IdleInTransactionSessionTimeoutError,
)
# What asyncpg says, as an InterfaceError, about a connection or pool already closed.
_CLOSED = ("connection is closed", "pool is closing", "pool is closed")
_NOT_SENT = "connection is closed"
# What asyncpg says, as an InternalClientError, when a statement meets a protocol parked in
# another state (the server's unsolicited FATAL on an idle connection; see above).
_PARKED = "cannot switch to state"
# Unavailable too, but the connection is intact and the statement merely took too long
# (command_timeout, statement_timeout, pg_cancel_backend): running it again would only
# double the wait.
_TOO_SLOW = (TimeoutError, asyncpg.exceptions.QueryCanceledError)


def _parked(exc: BaseException) -> bool:
    return isinstance(exc, asyncpg.exceptions.InternalClientError) and str(exc).startswith(_PARKED)


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` means "the database is not there right now" (the module docstring)."""
    if isinstance(exc, _SERVER_GONE) or _parked(exc):
        return True
    return isinstance(exc, asyncpg.exceptions.InterfaceError) and any(
        closed in str(exc) for closed in _CLOSED
    )


def _never_sent(exc: BaseException) -> bool:
    """asyncpg checks the connection and its protocol state before it writes a
    statement; these are what it raises when they are not fit (nothing reached the
    server)."""
    if _parked(exc):
        return True
    return isinstance(exc, asyncpg.exceptions.InterfaceError) and _NOT_SENT in str(exc)


def _discard_if_lost(conn: Connection, exc: BaseException) -> None:
    """Close a connection a lost database left behind, so the pool reconnects instead of
    handing it out again (its release then only returns the slot)."""
    if not is_unavailable(exc) or isinstance(exc, _TOO_SLOW):
        return
    # A connection the driver saw end has been handed back to the pool already (asyncpg
    # releases it on close): its proxy refuses every call, and there is nothing to close.
    with suppress(asyncpg.exceptions.InterfaceError):
        if not conn.is_closed():
            conn.terminate()


@contextmanager
def unavailable_on_loss() -> Iterator[None]:
    """Statements run inside this block (on a pool or a connection) raise
    DatabaseUnavailable for a lost database; everything else passes unchanged."""
    try:
        yield
    except Exception as exc:
        if is_unavailable(exc):
            raise DatabaseUnavailable(type(exc).__name__) from exc
        raise


@asynccontextmanager
async def pooled(pool: asyncpg.Pool, *, untouched: bool = False) -> AsyncIterator[Connection]:
    """A pooled connection for a block that is never run again (it may have committed),
    a lost database raised as DatabaseUnavailable; a failure to take the connection back
    after the block finished is not the block's (see above). `untouched`: the block sets
    no session state, so its release skips the session reset (pool.py)."""
    finished = False
    try:
        async with pool.acquire() as conn:
            if untouched:
                session_untouched(conn)
            try:
                yield conn
            except Exception as exc:
                _discard_if_lost(conn, exc)
                raise
            finished = True
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        if finished:
            log.info("a connection was lost on its release: %s", type(exc).__name__)
            return
        raise DatabaseUnavailable(type(exc).__name__) from exc


class Unit(Enum):
    """What a unit of work does, which decides whether it may run again (see above)."""

    READ = "read"
    TRANSACTION = "transaction"
    STATEMENTS = "statements"


class Step(Enum):
    """Where a unit of work was when its connection was lost."""

    acquire = "acquire"  # taking a connection from the pool: nothing was sent
    work = "work"  # running its statements (inside its transaction, for TRANSACTION)
    commit = "commit"  # COMMIT was sent: the transaction may have committed
    done = "done"  # finished: only the release of the connection failed


class _MayRunAgain(Exception):
    """The first run failed where it cannot have changed anything."""


def may_run_again(unit: Unit, step: Step, exc: BaseException) -> bool:
    """Whether a unit whose connection was lost (`exc`) at `step` cannot have changed
    anything, so that running it again cannot do anything twice."""
    if step is Step.done or isinstance(exc, _TOO_SLOW):
        return False
    if step is Step.acquire or unit is Unit.READ:
        return True
    if unit is Unit.TRANSACTION:
        return step is Step.work
    return _never_sent(exc)


async def _run_once(
    pool: asyncpg.Pool, unit: Unit, work: Callable[[Connection], Awaitable[T]], untouched: bool
) -> T:
    step = Step.acquire
    try:
        async with pool.acquire() as conn:
            if untouched:
                session_untouched(conn)
            step = Step.work
            try:
                if unit is Unit.TRANSACTION:
                    async with conn.transaction():
                        result = await work(conn)
                        step = Step.commit
                else:
                    result = await work(conn)
            except Exception as exc:
                _discard_if_lost(conn, exc)
                raise
            step = Step.done
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        if step is Step.done:
            log.info("a connection was lost on its release: %s", type(exc).__name__)
            return result
        if may_run_again(unit, step, exc):
            raise _MayRunAgain(type(exc).__name__) from exc
        raise DatabaseUnavailable(type(exc).__name__) from exc
    return result


async def run_unit(
    pool: asyncpg.Pool,
    unit: Unit,
    work: Callable[[Connection], Awaitable[T]],
    *,
    untouched: bool = False,
) -> T:
    """`work` on a pooled connection (in one transaction for Unit.TRANSACTION), run once
    more when its first run was lost where that cannot have changed anything; raises
    DatabaseUnavailable when the database stays lost or the first run may have committed.
    `untouched`: the work sets no session state (pool.py, session_untouched)."""
    try:
        return await _run_once(pool, unit, work, untouched)
    except _MayRunAgain as first:
        log.info("database connection lost (%s); running the %s unit again", first, unit.value)
    # One turn of the event loop first: the ends of other connections the same kill cut
    # are read, and the pool replaces them instead of handing one out to the second run.
    await asyncio.sleep(0)
    try:
        return await _run_once(pool, unit, work, untouched)
    except _MayRunAgain as second:
        cause = second.__cause__
        raise DatabaseUnavailable(str(second)) from cause
