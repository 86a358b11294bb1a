"""`activity-core automations`: an operator's commands on automations, over the HTTP API.

    activity-core automations list
    activity-core automations show AUTOMATION
    activity-core automations pause AUTOMATION [--reason TEXT]
    activity-core automations resume AUTOMATION
    activity-core automations fire AUTOMATION [--correlation-id ID] [--param KEY=VALUE]...
                                   [--idempotency-key KEY]

AUTOMATION is a slug or a UUID. Each prints a table (or lines) by default and the API's
JSON with `--json`. The API, the credential and the exit codes are those of
`activity-core runs` (the plumbing of both is operator/api_cli.py): ACTIVITY_CORE_API_URL
(or `--url`), the token from ACTIVITY_CORE_OPERATOR_TOKEN_FILE or
ACTIVITY_CORE_OPERATOR_TOKEN. Exit codes: 0 done (a repeated pause or resume included);
1 refused (not_found, state_conflict: manual only, paused by its file, or a fire of a paused
automation; an invalid request); 2 usage or configuration; 3 activity-core unreachable or
answering 5xx (Temporal down included); 4 the credential was refused.

It talks to the API only (httpx); it imports nothing of the service.
"""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from activity_core.operator.api_cli import (
    EXIT_OK,
    URL_VARIABLE,
    Api,
    Command,
    Io,
    OperatorCli,
    cut,
    operator_parser,
    print_json,
    print_table,
)

__all__ = ["main"]

PROG = "activity-core automations"


def _path(automation: str, tail: str = "") -> str:
    return f"/ops/automations/{urllib.parse.quote(automation, safe='')}{tail}"


def _state(view: dict[str, Any]) -> str:
    if not view["paused"]:
        return "active"
    if view.get("paused_by"):
        return f"paused by {view['paused_by']}"
    return "paused (definition)"


def _describe(io: Io, view: dict[str, Any]) -> None:
    schedule = f"{view['cron']} {view['timezone'] or ''}".strip() if view["cron"] else "manual"
    lines = [
        ("automation", f"{view['slug']} ({view['id']})"),
        ("title", view["title"]),
        ("schedule", schedule),
        ("state", _state(view)),
    ]
    if view.get("paused_at"):
        lines.append(("paused at", view["paused_at"]))
    if view.get("reason"):
        lines.append(("reason", view["reason"]))
    if view["cron"]:
        lines.append(("temporal", view["schedule"]))
        lines.append(("next fires", ", ".join(view["next_fire_times"]) or "none"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        io.out.write(f"{key.ljust(width)}  {value}\n")


def cmd_list(api: Api, args: argparse.Namespace, io: Io) -> int:
    index = api.call("GET", "/ops/automations").body
    if args.json:
        print_json(io.out, index)
        return EXIT_OK
    rows = []
    for automation in index["automations"]:
        schedule = automation["schedule"]
        next_fire = "-"
        if schedule is not None:
            view = api.call("GET", _path(automation["slug"])).body
            next_fire = view["next_fire_times"][0] if view["next_fire_times"] else "-"
            state = _state(view)
        else:
            state = "paused" if automation["paused"] else "active"
        last = automation["last_fire"]
        rows.append(
            [
                automation["slug"],
                state,
                schedule["cron"] if schedule else "manual",
                next_fire,
                f"{last['started_at'][:19]} {last['status']}" if last else "never",
                cut(automation["title"], 40),
            ]
        )
    print_table(io.out, ["SLUG", "STATE", "SCHEDULE", "NEXT FIRE", "LAST FIRE", "TITLE"], rows)
    return EXIT_OK


def _print_view(io: Io, args: argparse.Namespace, view: dict[str, Any]) -> int:
    """The automation as show, pause and resume print it: the API's JSON, or described."""
    if args.json:
        print_json(io.out, view)
    else:
        _describe(io, view)
    return EXIT_OK


def cmd_show(api: Api, args: argparse.Namespace, io: Io) -> int:
    view = api.call("GET", _path(args.automation)).body
    return _print_view(io, args, view)


def cmd_pause(api: Api, args: argparse.Namespace, io: Io) -> int:
    body = {"reason": args.reason} if args.reason is not None else None
    view = api.call("POST", _path(args.automation, "/pause"), body=body).body
    return _print_view(io, args, view)


def cmd_resume(api: Api, args: argparse.Namespace, io: Io) -> int:
    view = api.call("POST", _path(args.automation, "/resume")).body
    return _print_view(io, args, view)


def cmd_fire(api: Api, args: argparse.Namespace, io: Io) -> int:
    body: dict[str, Any] = {}
    if args.correlation_id:
        body["correlation_id"] = args.correlation_id
    if args.param:
        body["params"] = dict(args.param)
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    started = api.call(
        "POST", _path(args.automation, "/fire"), ok=(202,), body=body, headers=headers
    ).body
    if args.json:
        print_json(io.out, started)
    else:
        io.out.write(
            f"started {started['workflow_id']} (run {started['run_id']}, "
            f"trigger {started['trigger_key']})\n"
        )
    return EXIT_OK


COMMANDS: dict[str, Command] = {
    "list": cmd_list,
    "show": cmd_show,
    "pause": cmd_pause,
    "resume": cmd_resume,
    "fire": cmd_fire,
}


def _param(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE: {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser, subcommand = operator_parser(
        PROG, "operator actions on automations", url_help=f"the API (default ${URL_VARIABLE})"
    )

    def command(name: str, help: str, *, automation: bool = True) -> argparse.ArgumentParser:
        one = subcommand(name, help)
        if automation:
            one.add_argument("automation", metavar="AUTOMATION", help="slug or UUID")
        return one

    command("list", "every automation: state, schedule, next and last fire", automation=False)
    command("show", "one automation: its pause and its schedule's next fire times")
    command("pause", "pause its Temporal Schedule (kept across syncs)").add_argument(
        "--reason", help="why (kept, sanitized, with the pause)"
    )
    command("resume", "resume an automation an operator paused")
    fire = command("fire", "fire it now, with a request context")
    fire.add_argument("--correlation-id")
    fire.add_argument("--param", action="append", type=_param, metavar="KEY=VALUE")
    fire.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="Idempotency-Key: the same key again fires nothing and prints the first fire "
        "(retry a command whose answer was lost with the same key); 1-128 of letters, "
        "digits and . _ : @ + = -",
    )
    return parser


main = OperatorCli(build_parser, COMMANDS)
