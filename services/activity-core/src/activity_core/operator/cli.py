"""`activity-core runs`: the operator's commands over the HTTP API.

    activity-core runs list [--state S] [--automation A] [--worker W] [--label L]...
                            [--target-repo R] [--created-after T] [--created-before T]
                            [--dead-letter] [--limit N] [--cursor C]
    activity-core runs show RUN_ID
    activity-core runs requeue RUN_ID... [--key K]
    activity-core runs cancel RUN_ID --reason TEXT
    activity-core runs explain RUN_ID
    activity-core runs publish RUN_ID
    activity-core runs summary
    activity-core runs workers
    activity-core runs changes RUN_ID [--patch]

Each prints a table (or lines) by default and the API's JSON with `--json`; `changes
--patch` prints the mbox `git am` applies on the run's baseline. The API is
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
import uuid
from typing import Any

from activity_core.operator.api_cli import (
    DEFAULT_URL,
    EXIT_CREDENTIAL,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    URL_VARIABLE,
    Api,
    CliError,
    Command,
    Io,
    OperatorCli,
    cut,
    operator_parser,
    print_json,
    print_table,
)

__all__ = [
    "EXIT_CREDENTIAL",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "main",
]

BULK_LIMIT = 100


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
            print_json(io.out, page)
        else:
            print_table(
                io.out,
                ["ID", "STATE", "ATTEMPT", "AUTOMATION", "REQUEUED AS", "ERROR"],
                [
                    [
                        run["id"],
                        run["state"],
                        run["attempt"],
                        run["automation"] or "",
                        ",".join(run["requeued_as"]) or "-",
                        cut(run["last_error"] or "", 60),
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
        print_json(io.out, page)
    else:
        print_table(
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
                    cut(run["title"], 40),
                ]
                for run in page["runs"]
            ],
        )
    _next_page(page, args, io)
    return EXIT_OK


def cmd_show(api: Api, args: argparse.Namespace, io: Io) -> int:
    run = api.call("GET", f"/ops-runs/{args.run_id}").body
    if args.json:
        print_json(io.out, run)
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
    publication = run.get("publication")
    io.out.write(f"{'publication':<{width}}  {_publication_line(publication)}\n")
    return EXIT_OK


def _publication_line(publication: object) -> str:
    """One line: the state, then what an operator looks for (branch, PR, error)."""
    if not isinstance(publication, dict):
        return "- (not asked for: activity-core runs publish RUN_ID)"
    parts = [str(publication.get("state"))]
    for key in ("ref", "commit", "pull_request_url", "error"):
        if publication.get(key):
            parts.append(f"{key}={publication[key]}")
    parts.append(f"requested_by={publication.get('requested_by')}")
    return "  ".join(parts)


def cmd_publish(api: Api, args: argparse.Namespace, io: Io) -> int:
    answer = api.call("POST", f"/ops-runs/{args.run_id}/publish", ok=(200, 202))
    if args.json:
        print_json(io.out, answer.body)
        return EXIT_OK
    publication = answer.body["publication"]
    started = "publication started" if answer.status == 202 else "publication"
    io.out.write(f"{answer.body['run_id']}  {started}: {_publication_line(publication)}\n")
    if publication["state"] == "pending":
        io.out.write("  follow it with: activity-core runs show RUN_ID\n")
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
        print_json(io.out, {"results": results})
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
        print_json(io.out, run)
    else:
        io.out.write(f"{run['id']}  cancelled: {run['state']}; {run['last_error']}\n")
    return EXIT_OK


def cmd_explain(api: Api, args: argparse.Namespace, io: Io) -> int:
    body = api.call("GET", f"/ops-runs/{args.run_id}/explain").body
    if args.json:
        print_json(io.out, body)
        return EXIT_OK
    io.out.write(f"{body['run_id']}  {body['state']}\n")
    for reason in body["reasons"]:
        io.out.write(f"  {reason['code']}: {reason['detail']}\n")
    return EXIT_OK


def cmd_summary(api: Api, args: argparse.Namespace, io: Io) -> int:
    body = api.call("GET", "/ops/runs/summary").body
    if args.json:
        print_json(io.out, body)
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
        print_json(io.out, body)
        return EXIT_OK
    print_table(
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


PATCH_MEDIA_TYPE = "application/mbox"


def cmd_changes(api: Api, args: argparse.Namespace, io: Io) -> int:
    if args.patch and args.json:
        raise CliError("--patch and --json: one or the other", EXIT_USAGE)
    if args.patch:
        patch = api.download(f"/ops-runs/{args.run_id}/changes.patch", media_type=PATCH_MEDIA_TYPE)
        buffer = getattr(io.out, "buffer", None)
        if buffer is not None:
            io.out.flush()
            buffer.write(patch)
            buffer.flush()
        else:
            io.out.write(patch.decode("utf-8", errors="replace"))
        return EXIT_OK
    body = api.call("GET", f"/ops-runs/{args.run_id}/changes").body
    if args.json:
        print_json(io.out, body)
        return EXIT_OK
    commits = body["commits"]
    io.out.write(
        f"{body['run_id']}  attempt {body['attempt']}: {len(commits)} "
        f"commit{'s' if len(commits) != 1 else ''} on {body['baseline'][:12]}, "
        f"tip {body['head_after'][:12]}\n"
    )
    for commit in commits:
        io.out.write(
            f"  {commit['sha'][:12]}  {_line(commit['subject'])}  "
            f"({_line(commit['author_name'])} <{_line(commit['author_email'])}>, "
            f"{commit['authored_at'][:10]})\n"
        )
    io.out.write("\n")
    print_table(
        io.out,
        ["STATUS", "+", "-", "PATH"],
        [
            [
                f["status"],
                "bin" if f["binary"] else f"+{f['additions']}",
                "bin" if f["binary"] else f"-{f['deletions']}",
                _line(f["path"])
                if f["old_path"] is None
                else f"{_line(f['old_path'])} -> {_line(f['path'])}",
            ]
            for f in body["files"]
        ],
    )
    if body["truncated"]:
        io.out.write(f"\nshown in part: {body['note'] or 'some diffs are cut'}\n")
    return EXIT_OK


COMMANDS: dict[str, Command] = {
    "list": cmd_list,
    "show": cmd_show,
    "requeue": cmd_requeue,
    "cancel": cmd_cancel,
    "explain": cmd_explain,
    "publish": cmd_publish,
    "summary": cmd_summary,
    "workers": cmd_workers,
    "changes": cmd_changes,
}


# -- arguments and the environment --------------------------------------------------------------


def _run_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a run id: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser, command = operator_parser(
        "activity-core runs",
        "operator actions on ops runs",
        url_help=f"the API (default ${URL_VARIABLE}, else {DEFAULT_URL})",
    )
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
    command(
        "publish", "push a succeeded run's changes as its branch and open a pull request"
    ).add_argument("run_id", type=_run_id)
    command("summary", "the queue at a glance")
    command("workers", "the workers the queue has seen")
    changes = command("changes", "what a run changed: its commits and files (+/-)")
    changes.add_argument("run_id", type=_run_id)
    changes.add_argument(
        "--patch", action="store_true", help="print the mbox (git am applies it on the baseline)"
    )
    return parser


main = OperatorCli(build_parser, COMMANDS)


# -- output -------------------------------------------------------------------------------------


def _line(text: str) -> str:
    """A name or subject on one line of a terminal: control characters (an escape
    sequence, a carriage return) shown as U+FFFD, never sent to the terminal."""
    return "".join("\ufffd" if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 else c for c in text)


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
