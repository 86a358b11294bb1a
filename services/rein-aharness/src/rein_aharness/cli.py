"""`rein-aharness`: the worker's command line.

    rein-aharness close-outbox status [--json]
    rein-aharness close-outbox replay [--limit N] [--json]
    rein-aharness run [--once] [--labels L,...] [--labels-mode any|all]   (not yet)

Settings are read here, at the entry, and a bad argument or variable ends the command
with one line on stderr and exit 2, never a traceback. Exit codes: see
operator/exit_codes.py (also printed by `--help`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from rein_aharness.operator.commands import replay_command, status_command
from rein_aharness.operator.exit_codes import EXIT_CODE_HELP, ExitCode
from rein_aharness.outbox.errors import OutboxPathError
from rein_aharness.settings import SettingsProblem, load_settings

__all__ = ["main"]

_PROG = "rein-aharness"
_MAX_LIMIT = 1_000_000


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so main() decides the exit code and stays testable."""

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


def _parser() -> _Parser:
    parser = _Parser(
        prog=_PROG,
        description="The rein-aharness worker and its close-outbox operator controls.",
        epilog=EXIT_CODE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    run = commands.add_parser("run", help="the worker loop (not implemented yet)")
    run.add_argument("--once", action="store_true")
    run.add_argument("--labels", metavar="L,...")
    run.add_argument("--labels-mode", choices=("any", "all"), default="any")

    outbox = commands.add_parser(
        "close-outbox",
        help="inspect or replay the durable close outbox",
        epilog=EXIT_CODE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = outbox.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    status = actions.add_parser(
        "status",
        help="counts and pending/quarantined entries",
        epilog=EXIT_CODE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    status.add_argument("--json", action="store_true", help="stable JSON instead of a table")
    replay = actions.add_parser(
        "replay",
        help="deliver pending closes to Activity Core (closes only)",
        epilog=EXIT_CODE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument("--limit", type=_limit, metavar="N", help="deliver at most N entries")
    replay.add_argument("--json", action="store_true", help="stable JSON instead of a table")
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
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else int(ExitCode.USAGE)
    try:
        if args.command == "run":
            return _fail("run: the worker loop is not implemented yet", ExitCode.USAGE)
        settings = load_settings()
        if args.action == "status":
            return int(status_command(settings, as_json=args.json, out=sys.stdout))
        return int(replay_command(settings, limit=args.limit, as_json=args.json, out=sys.stdout))
    except SettingsProblem as exc:
        return _fail(str(exc), ExitCode.USAGE)
    except (OutboxPathError, OSError) as exc:
        return _fail(f"close outbox unusable: {_os_message(exc)}", ExitCode.STORE_UNUSABLE)
    except KeyboardInterrupt:
        return _fail("interrupted", ExitCode.INTERRUPTED)


def _os_message(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        target = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{target}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
