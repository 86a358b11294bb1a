"""`activity-core runs`: the operator's commands over the HTTP API.

    activity-core runs list [--state S] [--automation A] [--worker W] [--label L]...
                            [--target-repo R] [--created-after T] [--created-before T]
                            [--dead-letter] [--limit N] [--cursor C]
    activity-core runs show RUN_ID
    activity-core runs requeue RUN_ID... [--key K]
    activity-core runs cancel RUN_ID --reason TEXT
    activity-core runs explain RUN_ID
    activity-core runs summary
    activity-core runs workers

Each prints a table (or lines) by default and the API's JSON with `--json`. The API is
ACTIVITY_CORE_API_URL (default http://127.0.0.1:8080, or `--url`); the credential is the
contents of ACTIVITY_CORE_OPERATOR_TOKEN_FILE when set, else ACTIVITY_CORE_OPERATOR_TOKEN
(an operator's token; a viewer's reads only).

Exit codes: 0 done; 1 refused for what was asked (not_found, state_conflict, an invalid
request; for a requeue of several runs: any of them); 2 usage or configuration (bad
arguments, no token); 3 activity-core unreachable or answering 5xx or an unexpected body;
4 the credential was refused (401, or 403: a worker's token, or a viewer asking for an
action).

It talks to the API only (httpx); it imports nothing of the service.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

__all__ = [
    "EXIT_CREDENTIAL",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "main",
]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_CREDENTIAL = 4

URL_VARIABLE = "ACTIVITY_CORE_API_URL"
TOKEN_VARIABLE = "ACTIVITY_CORE_OPERATOR_TOKEN"
TOKEN_FILE_VARIABLE = "ACTIVITY_CORE_OPERATOR_TOKEN_FILE"
DEFAULT_URL = "http://127.0.0.1:8080"
BULK_LIMIT = 100
TIMEOUT_SECONDS = 30.0


class CliError(Exception):
    """A failure to report in one line, with its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Io:
    out: TextIO
    err: TextIO


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


class Api:
    """The few calls the commands make; every answer that is not what a command expects
    becomes a CliError with the exit code its kind has."""

    def __init__(self, http: httpx.Client) -> None:
        self._http = http

    def call(
        self,
        method: str,
        path: str,
        *,
        ok: Sequence[int] = (200,),
        params: Any = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        try:
            response = self._http.request(method, path, params=params, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise CliError(
                f"activity-core is not reachable at {self._http.base_url}: {type(exc).__name__}",
                EXIT_UNAVAILABLE,
            ) from exc
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.status_code in ok and payload is not None:
            return Answer(response.status_code, payload)
        raise _refusal(response.status_code, payload)


def _refusal(status: int, payload: Any) -> CliError:
    code = payload.get("code") if isinstance(payload, dict) else None
    detail = payload.get("detail") if isinstance(payload, dict) else None
    said = f"{code}: {detail}" if code and detail else "an unexpected answer"
    if isinstance(payload, dict) and isinstance(payload.get("errors"), list):
        fields = [".".join(str(p) for p in e.get("loc", [])) for e in payload["errors"][:5]]
        said += f" ({', '.join(f for f in fields if f)})" if any(fields) else ""
    message = f"activity-core answered {status} {said}"
    if status in (401, 403):
        return CliError(message, EXIT_CREDENTIAL)
    if 400 <= status < 500 and code:
        return CliError(message, EXIT_REFUSED)
    return CliError(message, EXIT_UNAVAILABLE)


# -- the commands -------------------------------------------------------------------------------


def cmd_list(api: Api, args: argparse.Namespace, io: Io) -> int:
    params: list[tuple[str, str]] = []
    for name in ("automation", "worker", "created_after", "created_before", "cursor"):
        value = getattr(args, name)
        if value is not None:
            params.append((name, value))
    params.append(("limit", str(args.limit)))
    if args.dead_letter:
        if args.state or args.label or args.target_repo or args.worker:
            raise CliError(
                "--dead-letter takes --automation, --limit and --cursor only", EXIT_USAGE
            )
        page = api.call("GET", "/ops/runs/dead-letter", params=params).body
        if args.json:
            _json(io.out, page)
        else:
            _table(
                io.out,
                ["ID", "STATE", "ATTEMPT", "AUTOMATION", "REQUEUED AS", "ERROR"],
                [
                    [
                        run["id"],
                        run["state"],
                        run["attempt"],
                        run["automation"] or "",
                        ",".join(run["requeued_as"]) or "-",
                        _cut(run["last_error"] or "", 60),
                    ]
                    for run in page["runs"]
                ],
            )
        _next_page(page, args, io)
        return EXIT_OK
    if args.state:
        params.append(("state", args.state))
    for label in args.label or ():
        params.append(("label", label))
    if args.target_repo:
        params.append(("target_repo", args.target_repo))
    page = api.call("GET", "/ops-runs", params=params).body
    if args.json:
        _json(io.out, page)
    else:
        _table(
            io.out,
            ["ID", "STATE", "ATTEMPT", "PRIORITY", "OWNER", "CREATED", "TITLE"],
            [
                [
                    run["id"],
                    run["state"],
                    run["attempt"],
                    run["priority"],
                    run["claim_owner"] or "-",
                    run["created_at"][:19],
                    _cut(run["title"], 40),
                ]
                for run in page["runs"]
            ],
        )
    _next_page(page, args, io)
    return EXIT_OK


def cmd_show(api: Api, args: argparse.Namespace, io: Io) -> int:
    run = api.call("GET", f"/ops-runs/{args.run_id}").body
    if args.json:
        _json(io.out, run)
        return EXIT_OK
    shown = [
        "id",
        "state",
        "attempt",
        "priority",
        "claim_owner",
        "lease_until",
        "labels",
        "target_repo",
        "title",
        "harness_profile_ref",
        "activity_definition_id",
        "triggering_event_id",
        "last_error",
        "cancelled_by",
        "requeued_from",
        "requeued_as",
        "created_at",
        "updated_at",
    ]
    width = max(len(key) for key in shown)
    for key in shown:
        value = run.get(key)
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        io.out.write(f"{key:<{width}}  {'-' if value is None else value}\n")
    return EXIT_OK


def cmd_requeue(api: Api, args: argparse.Namespace, io: Io) -> int:
    headers = {"Idempotency-Key": args.key} if args.key else {}
    if len(args.run_ids) == 1:
        run_id = args.run_ids[0]
        answer = api.call("POST", f"/ops-runs/{run_id}/requeue", ok=(200, 201), headers=headers)
        results = [{"run_id": run_id, "status": answer.status, "successor": answer.body}]
    else:
        results = []
        for start in range(0, len(args.run_ids), BULK_LIMIT):
            chunk = args.run_ids[start : start + BULK_LIMIT]
            body = api.call(
                "POST", "/ops-runs/requeue", body={"run_ids": chunk}, headers=headers
            ).body
            results += body["results"]
    if args.json:
        _json(io.out, {"results": results})
    else:
        for result in results:
            if result["status"] in (200, 201):
                made = "requeued as" if result["status"] == 201 else "already requeued as"
                io.out.write(f"{result['run_id']}  {made} {result['successor']['id']}\n")
            else:
                io.out.write(
                    f"{result['run_id']}  refused {result['status']} {result['code']}: "
                    f"{result['detail']}\n"
                )
    refused = [r for r in results if r["status"] not in (200, 201)]
    return EXIT_REFUSED if refused else EXIT_OK


def cmd_cancel(api: Api, args: argparse.Namespace, io: Io) -> int:
    run = api.call("POST", f"/ops-runs/{args.run_id}/cancel", body={"reason": args.reason}).body
    if args.json:
        _json(io.out, run)
    else:
        io.out.write(f"{run['id']}  cancelled: {run['state']}; {run['last_error']}\n")
    return EXIT_OK


def cmd_explain(api: Api, args: argparse.Namespace, io: Io) -> int:
    body = api.call("GET", f"/ops-runs/{args.run_id}/explain").body
    if args.json:
        _json(io.out, body)
        return EXIT_OK
    io.out.write(f"{body['run_id']}  {body['state']}\n")
    for reason in body["reasons"]:
        io.out.write(f"  {reason['code']}: {reason['detail']}\n")
    return EXIT_OK


def cmd_summary(api: Api, args: argparse.Namespace, io: Io) -> int:
    body = api.call("GET", "/ops/runs/summary").body
    if args.json:
        _json(io.out, body)
        return EXIT_OK
    oldest = body["oldest_open"]
    age = f"{_age(oldest['age_seconds'])} ({oldest['id']})" if oldest else "-"
    io.out.write(
        f"open {body['open']}  claimed {body['claimed']}  stalled {body['stalled']}\n"
        f"oldest open: {age}\n"
        f"since {body['terminal_since'][:19]}: succeeded {body['succeeded']}  "
        f"failed {body['failed']}  expired {body['expired']}\n"
    )
    return EXIT_OK


def cmd_workers(api: Api, args: argparse.Namespace, io: Io) -> int:
    body = api.call("GET", "/ops/workers").body
    if args.json:
        _json(io.out, body)
        return EXIT_OK
    _table(
        io.out,
        ["WORKER", "STATE", "LAST CLAIM", "LABELS", "LIMIT", "HOLDING"],
        [
            [
                w["worker_id"],
                w["state"],
                (w["last_claim_at"] or "-")[:19],
                f"{w['labels_mode']}:{','.join(w['labels'])}" if w["labels"] else "any run",
                w["limit"] if w["limit"] is not None else "-",
                len(w["holding"]),
            ]
            for w in body["workers"]
        ],
    )
    return EXIT_OK


Command = Callable[[Api, argparse.Namespace, Io], int]
COMMANDS: dict[str, Command] = {
    "list": cmd_list,
    "show": cmd_show,
    "requeue": cmd_requeue,
    "cancel": cmd_cancel,
    "explain": cmd_explain,
    "summary": cmd_summary,
    "workers": cmd_workers,
}


# -- arguments and the environment --------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise CliError(f"{self.prog}: {message}", EXIT_USAGE)


def _run_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a run id: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="activity-core runs", description="operator actions on ops runs")
    parser.add_argument("--url", help=f"the API (default ${URL_VARIABLE}, else {DEFAULT_URL})")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        one = sub.add_parser(name, help=help)
        one.add_argument("--json", action="store_true", help="print the API's JSON")
        return one

    listing = command("list", "runs newest first, filtered (or the dead letter)")
    listing.add_argument("--state", choices=["open", "claimed", "succeeded", "failed", "expired"])
    listing.add_argument("--automation", help="slug or UUID")
    listing.add_argument("--worker", help="the lease holder (claim_owner)")
    listing.add_argument("--label", action="append", help="repeatable; all must be present")
    listing.add_argument("--target-repo")
    listing.add_argument("--created-after", help="ISO timestamp with a timezone")
    listing.add_argument("--created-before", help="ISO timestamp with a timezone")
    listing.add_argument("--dead-letter", action="store_true", help="failed and expired runs")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--cursor", help="the next_cursor of the previous page")
    command("show", "one run").add_argument("run_id", type=_run_id)
    requeue = command("requeue", "a new open run for each failed or expired run")
    requeue.add_argument("run_ids", nargs="+", type=_run_id, metavar="RUN_ID")
    requeue.add_argument(
        "--key",
        help="Idempotency-Key: the same key again answers the same successor; without one "
        "a run has one successor (use a new key to requeue it again)",
    )
    cancel = command("cancel", "fail an open or claimed run")
    cancel.add_argument("run_id", type=_run_id)
    cancel.add_argument("--reason", required=True)
    command("explain", "why a run is where it is").add_argument("run_id", type=_run_id)
    command("summary", "the queue at a glance")
    command("workers", "the workers the queue has seen")
    return parser


def _token(environ: dict[str, str]) -> str:
    path = environ.get(TOKEN_FILE_VARIABLE, "").strip()
    if path:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CliError(
                f"{TOKEN_FILE_VARIABLE}: cannot read {path} ({exc.strerror})", EXIT_USAGE
            ) from None
        if not token:
            raise CliError(f"{TOKEN_FILE_VARIABLE}: {path} is empty", EXIT_USAGE)
        return token
    token = environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        raise CliError(
            f"no operator token: set {TOKEN_VARIABLE} or {TOKEN_FILE_VARIABLE}", EXIT_USAGE
        )
    return token


def _base_url(flag: str | None, environ: dict[str, str]) -> str:
    url = flag or environ.get(URL_VARIABLE, "").strip() or DEFAULT_URL
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise CliError(f"{URL_VARIABLE}: not an http(s) URL: {url!r}", EXIT_USAGE)
    return url.rstrip("/")


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: dict[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run one `activity-core runs` command; the exit code. `environ`, `transport` and the
    streams default to the process's (tests inject theirs)."""
    out = out or sys.stdout
    err = err or sys.stderr
    env = dict(os.environ if environ is None else environ)
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        base_url = _base_url(args.url, env)
        token = _token(env)
        with httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=TIMEOUT_SECONDS,
            transport=transport,
        ) as http:
            return COMMANDS[args.command](Api(http), args, Io(out, err))
    except CliError as exc:
        err.write(f"activity-core runs: {exc}\n")
        return exc.code
    except SystemExit as exc:  # --help
        return int(exc.code or 0)


# -- output -------------------------------------------------------------------------------------


def _json(out: TextIO, value: Any) -> None:
    out.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _table(out: TextIO, header: list[str], rows: list[list[Any]]) -> None:
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def _next_page(page: dict[str, Any], args: argparse.Namespace, io: Io) -> None:
    """The next page's cursor, on stderr so the table stays the only thing on stdout."""
    if page.get("next_cursor") and not args.json:
        io.err.write(f"more: --cursor {page['next_cursor']}\n")
