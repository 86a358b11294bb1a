"""Scratch resources (the database, the API server's process), released even on Ctrl-C.

The async cleanup releases each one where it was made; `final_cleanup`, after the event
loop, removes whatever that could not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from claim_bench.errors import BenchError
from ops_testsupport import databases
from ops_testsupport.databases import create_database, database_name

__all__ = [
    "LEFTOVERS",
    "Leftovers",
    "drop_database",
    "exit_code_of",
    "final_cleanup",
    "resolve_dsn",
    "scratch_database",
    "server_for_bench",
    "sigint_ignored",
]


@dataclass
class Leftovers:
    """What this process created and must remove; checked again after the event loop."""

    server_dsn: str | None = None
    databases: set[str] = field(default_factory=set)
    pids: set[int] = field(default_factory=set)


LEFTOVERS = Leftovers()


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Cleanup must finish: a second Ctrl-C during it would leave the database behind."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


async def drop_database(server_dsn: str, name: str) -> None:
    await databases.drop_database(server_dsn, name)
    LEFTOVERS.databases.discard(name)


@contextlib.asynccontextmanager
async def scratch_database(server_dsn: str) -> AsyncIterator[str]:
    name = database_name("bench")
    LEFTOVERS.databases.add(name)
    dsn = await create_database(server_dsn, name)
    try:
        yield dsn
    finally:
        with sigint_ignored():
            print(f"· dropping scratch database {name}", flush=True)
            await drop_database(server_dsn, name)


def resolve_dsn(explicit: str | None) -> str | None:
    return explicit or os.environ.get("BENCH_DATABASE_URL") or os.environ.get("TEST_DATABASE_URL")


def server_for_bench(explicit: str | None, stack: contextlib.ExitStack, prefix: str) -> str:
    """The PostgreSQL server a bench makes its scratch databases on: `--database-url`,
    BENCH_DATABASE_URL, TEST_DATABASE_URL, else an embedded one that `stack` removes."""
    server_dsn = resolve_dsn(explicit)
    if server_dsn is None:
        from activity_core.db.embedded import start_embedded

        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        state = Path(tempfile.mkdtemp(prefix=prefix))
        stack.callback(shutil.rmtree, state, True)
        server_dsn, handle = start_embedded(state, database="postgres")
        stack.callback(handle.cleanup)
        print(f"embedded PostgreSQL under {state}")
    LEFTOVERS.server_dsn = server_dsn
    return server_dsn


def exit_code_of(bench: Callable[[], int]) -> int:
    """Run a bench's event loop (`bench`): Ctrl-C, SIGTERM (the main task cancelled) and a
    BenchError end it with one line and their exit code; what it leaves is removed."""
    try:
        return bench()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except asyncio.CancelledError:
        print("\nterminated", file=sys.stderr)
        return 143
    except BenchError as exc:
        print(f"\nbenchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        final_cleanup()


def final_cleanup() -> None:
    """After the event loop: whatever the async cleanup could not remove."""
    for pid in list(LEFTOVERS.pids):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        LEFTOVERS.pids.discard(pid)
    if LEFTOVERS.server_dsn and LEFTOVERS.databases:
        with sigint_ignored():
            for name in list(LEFTOVERS.databases):
                try:
                    asyncio.run(drop_database(LEFTOVERS.server_dsn, name))
                    print(f"· dropped scratch database {name}")
                except (OSError, asyncpg.PostgresError) as exc:
                    print(f"! could not drop scratch database {name}: {exc}", file=sys.stderr)
