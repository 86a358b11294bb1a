"""Forward-only schema migrations, safe when several replicas run them at once.

Each `migrations/NNNN_name.sql` file is applied once, in order, in its own transaction,
while a session advisory lock is held, so two replicas starting together serialize
instead of racing. An applied file whose checksum changed is refused: history is append-only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

__all__ = [
    "MIGRATION_LOCK_KEY",
    "Migration",
    "MigrationError",
    "bundled_migrations",
    "current_version",
    "latest_version",
    "migrate",
]

# An arbitrary constant shared by every replica; 'ops-q' in ASCII.
MIGRATION_LOCK_KEY = 0x6F70732D71

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


class MigrationError(Exception):
    """The database's migration history does not fit the files shipped with this build."""


def bundled_migrations() -> list[Migration]:
    found: list[Migration] = []
    for entry in resources.files("activity_core.db").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    return found


def latest_version() -> int:
    migrations = bundled_migrations()
    return migrations[-1].version if migrations else 0


_CREATE_HISTORY = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def migrate(conn: asyncpg.Connection, *, up_to: int | None = None) -> list[int]:
    """Apply pending migrations (those up to ``up_to`` only, when given: a database as an
    older build left it, for the tests of a migration over existing rows); answer the
    versions applied by this call."""
    applied_now: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(_CREATE_HISTORY)
        rows = await conn.fetch("SELECT version, checksum FROM schema_migrations")
        history = {r["version"]: r["checksum"] for r in rows}
        for migration in bundled_migrations():
            recorded = history.get(migration.version)
            if recorded is not None:
                if recorded != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version:04d}_{migration.name} was changed "
                        "after it was applied; add a new migration instead"
                    )
                continue
            if up_to is not None and migration.version > up_to:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            applied_now.append(migration.version)
        unknown = sorted(set(history) - {m.version for m in bundled_migrations()})
        if unknown:
            raise MigrationError(
                f"database has migrations this build does not know: {unknown}; "
                "run a newer activity-core"
            )
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return applied_now


async def current_version(conn: asyncpg.Connection) -> int:
    """The highest applied version, 0 when the history table does not exist yet."""
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return 0
    value = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations")
    return int(value)
