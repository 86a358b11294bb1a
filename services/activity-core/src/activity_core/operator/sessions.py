"""Server-side sessions of the ops UI, and the throttle on signing in.

A session is a row in `ops_ui_sessions` (migration 0008). The browser holds only a
random id (`s1.<43 base64url characters>`, 256 bits); the table holds its sha256 digest,
so neither a read of the table nor a log line with a digest can be replayed as a cookie.
A session

- ends when its operator signs out (the row is deleted: the cookie is worthless in every
  browser that may hold a copy), or signs out everywhere (all the operator's rows);
- ends when its credential changes: it keeps a binding of the token digest it signed in
  with, and the HTTP layer compares that with the running configuration on every request,
  so a rotated token or a removed operator ends its sessions at the next restart;
- expires SESSION_LIFETIME after sign-in, and after SESSION_IDLE without a request;
- carries the CSRF token every form of the session sends back (ui_guard.py checks it).

Sign-in throttle: failed sign-ins are counted per client address and per operator name
typed, over a sliding LOGIN_WINDOW; at LOGIN_LIMIT_PER_CLIENT (resp. _PER_OPERATOR)
failures, sign-ins from that client (for that name) are refused 429 until enough of them
leave the window, without the token even being looked at. Counts live in the database,
so every API process shares them.

So that parallel sign-ins cannot all pass a check made before any of them is counted,
an attempt is recorded first (`attempt`: a row of ops_ui_login_failures, committed),
then counted, and only then is its token looked at; a refused attempt, and one that
signs in (`forget`), delete their row again, so what stays is the failures, as before.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from activity_core.operator import queries
from activity_core.operator.connection import connection

__all__ = [
    "LOGIN_LIMIT_PER_CLIENT",
    "LOGIN_LIMIT_PER_OPERATOR",
    "LOGIN_WINDOW",
    "SESSION_IDLE",
    "SESSION_LIFETIME",
    "SignInAttempt",
    "UiSession",
    "UiSessions",
    "credential_binding",
    "session_id_shape",
]

SESSION_LIFETIME = timedelta(hours=8)
SESSION_IDLE = timedelta(hours=1)
# last_seen_at is written at most this often per session (not on every page view)
_TOUCH_EVERY = timedelta(seconds=60)

LOGIN_WINDOW = timedelta(minutes=15)
LOGIN_LIMIT_PER_CLIENT = 10
LOGIN_LIMIT_PER_OPERATOR = 20

_SESSION_ID = re.compile(r"s1\.[A-Za-z0-9_-]{43}")
_BINDING_LABEL = "activity-core ops-ui session binding v1:"


def session_id_shape(value: str | None) -> bool:
    return value is not None and _SESSION_ID.fullmatch(value) is not None


def credential_binding(token_digest: str) -> str:
    """What a session keeps of the credential it signed in with: derived from the token's
    digest (never the token), enough to tell whether that credential is still the one
    configured."""
    return hashlib.sha256((_BINDING_LABEL + token_digest).encode("ascii")).hexdigest()


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


@dataclass(frozen=True)
class UiSession:
    operator: str
    credential_binding: str
    csrf_token: str
    created_at: datetime
    expires_at: datetime
    # seconds until the session expires, by the database's clock
    remaining_seconds: int


def _session(row: asyncpg.Record) -> UiSession:
    remaining = (row["expires_at"] - row["as_of"]).total_seconds()
    return UiSession(
        operator=row["operator"],
        credential_binding=row["credential_digest"],
        csrf_token=row["csrf_token"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        remaining_seconds=max(0, int(remaining)),
    )


@dataclass(frozen=True)
class SignInAttempt:
    """A sign-in attempt, recorded: its rows in ops_ui_login_failures, and when it was
    refused by the throttle, the seconds until this client (name) is taken again."""

    ids: tuple[int, ...]
    retry_after: int | None = None


class UiSessions:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def open(self, operator: str, binding: str, client: str) -> tuple[str, UiSession]:
        """A new session: (the id for the cookie, the session). Prunes ended sessions."""
        session_id = "s1." + _b64(secrets.token_bytes(32))
        csrf = _b64(secrets.token_bytes(32))
        async with connection(self._pool) as conn, conn.transaction():
            await conn.execute(queries.UI_SESSIONS_PRUNE, SESSION_IDLE)
            row = await conn.fetchrow(
                queries.UI_SESSION_INSERT,
                _digest(session_id),
                operator,
                binding,
                csrf,
                client[:200],
                SESSION_LIFETIME,
            )
        assert row is not None
        return session_id, _session(row)

    async def find(self, session_id: str | None) -> UiSession | None:
        """The live session this cookie value names; None for anything else (malformed,
        unknown, signed out, expired, idle too long)."""
        if not session_id_shape(session_id):
            return None
        assert session_id is not None
        digest = _digest(session_id)
        async with connection(self._pool) as conn:
            row = await conn.fetchrow(queries.UI_SESSION_FIND, digest, SESSION_IDLE)
            if row is None:
                return None
            if row["as_of"] - row["last_seen_at"] >= _TOUCH_EVERY:
                await conn.execute(queries.UI_SESSION_TOUCH, digest)
        return _session(row)

    async def close(self, session_id: str | None) -> str | None:
        """Sign out: the session ends wherever its cookie is. The operator it was, if any."""
        if not session_id_shape(session_id):
            return None
        assert session_id is not None
        async with connection(self._pool) as conn:
            operator: str | None = await conn.fetchval(
                queries.UI_SESSION_DELETE, _digest(session_id)
            )
        return operator

    async def close_all(self, operator: str) -> int:
        """Sign out everywhere: every session of this operator ends. How many there were."""
        async with connection(self._pool) as conn:
            status = await conn.execute(queries.UI_SESSION_DELETE_OPERATOR, operator)
        return int(status.split()[-1])

    # -- the sign-in throttle ----------------------------------------------------------------

    async def attempt(self, client: str, operator: str | None) -> SignInAttempt:
        """Record a sign-in attempt against the client and the operator name typed, then
        count it: refused (retry_after set, the record forgotten) when it is beyond a
        limit. Called before the token is looked at; the record stays as a failure
        unless `forget` is called (the token was right).

        Why this holds under READ COMMITTED without a lock: the insert commits before the
        count runs, and the count is a new statement, so its snapshot sees every attempt
        committed before it, its own included. Order the attempts by the commit of their
        insert: the k-th sees at least the k-1 before it that are failures (a failure's
        row is never deleted within the window) plus itself, so an attempt looked at
        (count <= limit) has at most `limit` failures before it and itself: at most
        `limit` failures, hence 401s, per window. In-flight attempts of others are
        counted too, which refuses more under a burst, never fewer. (A single INSERT ...
        SELECT count(*) would not do: concurrent statements do not see each other's
        uncommitted rows, and all would count below the limit; a per-client advisory
        lock would, but holds a pooled connection per waiting sign-in.)"""
        checks = [("client", client[:200], LOGIN_LIMIT_PER_CLIENT)]
        if operator is not None:
            checks.append(("operator", operator, LOGIN_LIMIT_PER_OPERATOR))
        async with connection(self._pool) as conn:
            async with conn.transaction():
                await conn.execute(queries.UI_LOGIN_FAILURES_PRUNE, LOGIN_WINDOW)
                ids: list[int] = [
                    await conn.fetchval(queries.UI_LOGIN_ATTEMPT_INSERT, scope, subject)
                    for scope, subject, _ in checks
                ]
            waits: list[timedelta] = []
            for (scope, subject, limit), own in zip(checks, ids, strict=True):
                row = await conn.fetchrow(
                    queries.UI_LOGIN_ATTEMPTS, scope, subject, LOGIN_WINDOW, limit, own
                )
                assert row is not None
                if row["attempts"] > limit:
                    # NULL: others of the window were forgotten since; try again soon
                    waits.append(row["retry_after"] or timedelta(0))
            if not waits:
                return SignInAttempt(tuple(ids))
            await conn.execute(queries.UI_LOGIN_ATTEMPT_FORGET, ids)
        return SignInAttempt(tuple(ids), max(1, int(max(waits).total_seconds()) + 1))

    async def forget(self, attempt: SignInAttempt) -> None:
        """The attempt signed in: it is no failure, and counts no more."""
        async with connection(self._pool) as conn:
            await conn.execute(queries.UI_LOGIN_ATTEMPT_FORGET, list(attempt.ids))
