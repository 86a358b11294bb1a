"""The asyncpg pool, with JSON codecs so jsonb columns round-trip as Python values."""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import Any

import asyncpg

from activity_core.db.errors import DATABASE_FAILURES
from ops_contracts import canonical_json

__all__ = [
    "APPLICATION_NAME",
    "EncodedJson",
    "Pool",
    "PoolConnection",
    "create_pool",
    "init_connection",
    "open_pool",
    "session_untouched",
]

# The pool's type, for code that holds one but needs no driver of its own (the HTTP edge).
Pool = asyncpg.Pool

log = logging.getLogger("activity_core")


class EncodedJson(str):
    """JSON text that canonical_json wrote: the json/jsonb codec sends it as it is
    instead of encoding the value again. Any other str is a JSON string value."""

    __slots__ = ()


def _encode_json(value: Any) -> str:
    if type(value) is EncodedJson:
        return value
    # canonical_json refuses NaN/Infinity, so nothing non-finite ever reaches a jsonb column
    return canonical_json(value).decode("utf-8")


async def init_connection(conn: asyncpg.Connection) -> None:
    for kind in ("json", "jsonb"):
        await conn.set_type_codec(
            kind, encoder=_encode_json, decoder=json.loads, schema="pg_catalog"
        )


class PoolConnection(asyncpg.Connection):
    """A pooled connection whose user can declare that it left no session state behind.

    On release the pool rolls back an open transaction and then runs the session reset
    query (`pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`): one more round
    trip per use, which on the claim queue's hot path cost more than a claim statement.
    Code that only runs plain statements and transactions (no SET, LISTEN, session
    advisory locks or cursors outside a transaction) calls `session_untouched()` after
    acquiring; every other use, e.g. emission's session advisory lock, keeps the reset.
    asyncpg documents overriding `get_reset_query` in a Connection subclass for this.
    """

    __slots__ = ("_session_untouched",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._session_untouched = False

    def session_untouched(self) -> None:
        """This use sets no session state: skip the reset query on its release (once)."""
        self._session_untouched = True

    def get_reset_query(self) -> str:
        if self._session_untouched:
            self._session_untouched = False
            return ""
        query: str = super().get_reset_query()
        return query


def session_untouched(conn: object) -> None:
    """Declare that this use of a pooled connection sets no session state (see above).

    Takes the pool's proxy or the connection; a connection of another class (a pool not
    made by create_pool) keeps asyncpg's full reset.
    """
    declare = getattr(conn, "session_untouched", None)
    if callable(declare):
        declare()


# What the pool's sessions are called in pg_stat_activity (and what an operator, or a fault
# test, selects them by) unless the DSN names them (`?application_name=`).
APPLICATION_NAME = "activity-core"


def _server_settings(dsn: str) -> dict[str, str]:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(dsn).query)
    return {} if "application_name" in query else {"application_name": APPLICATION_NAME}


async def create_pool(dsn: str, *, min_size: int, max_size: int) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=init_connection,
        connection_class=PoolConnection,
        # claims and closes are short; a statement that hangs longer is a fault, not work
        command_timeout=30,
        server_settings=_server_settings(dsn),
    )
    assert pool is not None
    return pool


async def open_pool(dsn: str, *, min_size: int, max_size: int) -> asyncpg.Pool:
    """The service's pool; if the database is unreachable at start, one that connects on
    demand.

    The process then stays up: /healthz answers, /readyz and the queue answer 503 until
    the database is back, rather than the process exiting with a traceback.
    """
    try:
        return await create_pool(dsn, min_size=min_size, max_size=max_size)
    except DATABASE_FAILURES as exc:
        log.warning(
            "database not reachable at start (%s); answering 503 until it is",
            type(exc).__name__,
        )
        return await create_pool(dsn, min_size=0, max_size=max_size)
