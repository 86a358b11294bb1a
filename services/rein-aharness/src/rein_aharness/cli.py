"""`rein-aharness`: the worker's command line.

    rein-aharness close-outbox status [--json]
    rein-aharness close-outbox replay [--limit N] [--json]
    rein-aharness close-outbox adopt [--json]
    rein-aharness run [--once] [--labels L,...] [--labels-mode any|all]

Settings are read here, at the entry, and a bad argument or variable ends the command
with one line on stderr and exit 2, never a traceback. Exit codes: see
operator/exit_codes.py (also printed by `--help`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import anyio
from pydantic import TypeAdapter, ValidationError

from ops_contracts import Label, LabelsMode
from rein_aharness.adapters.queue_errors import QueueError
from rein_aharness.operator.commands import adopt_command, replay_command, status_command
from rein_aharness.operator.exit_codes import EXIT_CODE_HELP, ExitCode
from rein_aharness.outbox.errors import OutboxIntegrityError, OutboxPathError
from rein_aharness.settings import ReinAharnessSettings, SettingsError, load_settings
from rein_aharness.worker.app import load_worker_catalogue, run_worker
from rein_aharness.worker.logs import configure_logging

__all__ = ["main"]

_PROG = "rein-aharness"
_MAX_LIMIT = 1_000_000
# The label grammar is contracts' (the one activity-core applies to definitions, claims
# and filters), so the CLI accepts exactly what a claim may carry.
_LABEL = TypeAdapter(Label)
_MAX_LABELS = 20


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so main() decides the exit code and stays testable.
    Every command's help ends with the exit codes, laid out as written."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODE_HELP)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: {message}")


def _limit(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= _MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {_MAX_LIMIT}")
    return value


def _labels(text: str) -> tuple[str, ...]:
    """Comma-separated labels, surrounding whitespace ignored, each a contracts `Label`."""
    labels = tuple(label.strip() for label in text.split(",") if label.strip())
    if not labels:
        raise argparse.ArgumentTypeError("give at least one label")
    if len(labels) > _MAX_LABELS:
        raise argparse.ArgumentTypeError(f"at most {_MAX_LABELS} labels")
    for label in labels:
        try:
            _LABEL.validate_python(label, strict=True)
        except ValidationError as exc:
            why = str(exc.errors()[0]["msg"]).splitlines()[0].removeprefix("Value error, ")
            raise argparse.ArgumentTypeError(f"not a label: {label[:100]!r} ({why})") from None
    return labels


def _parser() -> _Parser:
    parser = _Parser(
        prog=_PROG, description="The rein-aharness worker and its close-outbox operator controls."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {importlib.metadata.version('rein-aharness')}",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    run = commands.add_parser("run", help="the worker loop: replay closes, claim, execute, close")
    run.add_argument(
        "--once", action="store_true", help="one turn: replay, claim at most one run, exit"
    )
    run.add_argument("--labels", metavar="L,...", type=_labels, help="claim runs with these labels")
    run.add_argument(
        "--labels-mode",
        choices=("any", "all"),
        default="any",
        help="any: at least one label matches (default); all: every label",
    )

    outbox = commands.add_parser("close-outbox", help="inspect or replay the durable close outbox")
    actions = outbox.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    status = actions.add_parser("status", help="counts and pending/quarantined entries")
    status.add_argument("--json", action="store_true", help="stable JSON instead of a table")
    replay = actions.add_parser(
        "replay", help="deliver pending closes to Activity Core (closes only)"
    )
    replay.add_argument("--limit", type=_limit, metavar="N", help="deliver at most N entries")
    replay.add_argument("--json", action="store_true", help="stable JSON instead of a table")
    adopt = actions.add_parser(
        "adopt", help="accept a replaced outbox, or write off entries it lost, after a look"
    )
    adopt.add_argument("--json", action="store_true", help="stable JSON instead of a table")
    return parser


def _fail(message: str, code: ExitCode) -> int:
    print(f"{_PROG}: {message}", file=sys.stderr)
    return int(code)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return int(ExitCode.USAGE)
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else int(ExitCode.USAGE)
    try:
        settings = load_settings()
        configure_logging(
            settings.rein_aharness_log_level, worker_id=settings.activity_core_worker_id
        )
        if args.command == "run":
            return _run(settings, args)
        if args.action == "status":
            return int(status_command(settings, as_json=args.json, out=sys.stdout))
        if args.action == "adopt":
            return int(adopt_command(settings, as_json=args.json, out=sys.stdout))
        return int(replay_command(settings, limit=args.limit, as_json=args.json, out=sys.stdout))
    except SettingsError as exc:
        return _fail(str(exc), ExitCode.USAGE)
    except QueueError as exc:
        # Only a claim refused as invalid (a configuration problem) gets here.
        return _fail(f"run: {exc}", ExitCode.USAGE)
    except OutboxIntegrityError as exc:
        return _fail(f"close outbox refused: {exc}", ExitCode.INTEGRITY)
    except (OutboxPathError, OSError) as exc:
        return _fail(f"close outbox unusable: {_os_message(exc)}", ExitCode.STORE_UNUSABLE)
    except KeyboardInterrupt:
        return _fail("interrupted", ExitCode.INTERRUPTED)


def _run(settings: ReinAharnessSettings, args: argparse.Namespace) -> int:
    catalogue = load_worker_catalogue(settings)

    async def main() -> int:
        code = await run_worker(
            settings,
            catalogue,
            once=args.once,
            labels=args.labels,
            labels_mode=LabelsMode(args.labels_mode),
        )
        return int(code)

    return anyio.run(main)


def _os_message(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        target = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{target}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
