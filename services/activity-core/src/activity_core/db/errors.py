"""What the driver's exceptions mean to the rest of the service, named once.

Everything outside `db/` catches these names, never asyncpg's classes: the HTTP package
imports no driver at all (an import-linter contract in pyproject.toml holds it), and a
new failure class is added here rather than to a tuple in every module that waits on the
database.

- `DATABASE_FAILURES`: anything the database, or the way to it, can raise. For code that
  only needs to know "it did not work this time" — a background loop that tries again
  on its next tick, a CLI that reports and exits, a pool opened while the server is
  away. Which of these mean "unavailable" (503, retry) is decided by
  db/unavailable.py's `is_unavailable`, the one rule for that.
- `UNTRANSLATED_LOSS_FAILURES`: the classes a lost database raises that can reach the
  HTTP edge without passing through db/unavailable.py's units of work; the edge answers
  each by `is_unavailable` (503 or an internal error), never by the class alone.
- `SCHEMA_NOT_CURRENT_FAILURES`: a table or column this build needs is missing — `serve`
  without `--migrate` on a database this build has not migrated. An operator error with
  a known fix (`activity-core migrate`), answered 503 `schema_not_current`, as /readyz
  says.
"""

from __future__ import annotations

import asyncpg

__all__ = [
    "DATABASE_FAILURES",
    "SCHEMA_NOT_CURRENT_FAILURES",
    "UNTRANSLATED_LOSS_FAILURES",
]

DATABASE_FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)

# (ConnectionError: PostgreSQL is the only peer this service reaches by raw sockets.)
UNTRANSLATED_LOSS_FAILURES: tuple[type[Exception], ...] = (
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.IdleInTransactionSessionTimeoutError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    ConnectionError,
)

SCHEMA_NOT_CURRENT_FAILURES: tuple[type[Exception], ...] = (
    asyncpg.exceptions.UndefinedTableError,
    asyncpg.exceptions.UndefinedColumnError,
)
