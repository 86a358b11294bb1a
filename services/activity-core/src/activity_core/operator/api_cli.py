"""The plumbing of the operator CLIs over the HTTP API (`activity-core runs`, operator/cli.py;
`activity-core automations`, cli_automations.py): where the API is and which token to send,
one call that turns every unexpected answer into a one-line error with its exit code, the
output helpers, and the `main` both share.

Exit codes: 0 done; 1 refused for what was asked (a 4xx with a code other than 401/403);
2 usage or configuration; 3 activity-core unreachable, or 5xx, or an unexpected body; 4 the
credential was refused (401, 403).

It talks to the API only (httpx); it imports nothing of the service.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

__all__ = [
    "DEFAULT_URL",
    "EXIT_CREDENTIAL",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "TIMEOUT_SECONDS",
    "TOKEN_FILE_VARIABLE",
    "TOKEN_VARIABLE",
    "URL_VARIABLE",
    "Answer",
    "Api",
    "CliError",
    "Command",
    "Io",
    "OperatorCli",
    "Parser",
    "cut",
    "operator_parser",
    "print_json",
    "print_table",
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
        response = self._send(method, path, params=params, json=body, headers=headers)
        payload = _json_of(response)
        if response.status_code in ok and payload is not None:
            return Answer(response.status_code, payload)
        raise _refusal(response.status_code, payload)

    def download(self, path: str, *, media_type: str) -> bytes:
        """A GET whose 200 is not JSON (a patch, a bundle): its bytes; every other answer
        becomes a CliError as `call`'s do."""
        response = self._send("GET", path)
        if response.status_code == 200:
            if response.headers.get("content-type", "").split(";")[0].strip() != media_type:
                raise CliError(
                    f"activity-core answered 200 with {response.headers.get('content-type')!r},"
                    f" not {media_type}",
                    EXIT_UNAVAILABLE,
                )
            return response.content
        raise _refusal(response.status_code, _json_of(response))

    def _send(self, method: str, path: str, **request: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **request)
        except httpx.HTTPError as exc:
            raise CliError(
                f"activity-core is not reachable at {self._http.base_url}: {type(exc).__name__}",
                EXIT_UNAVAILABLE,
            ) from exc


def _json_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


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


Command = Callable[[Api, argparse.Namespace, Io], int]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise CliError(f"{self.prog}: {message}", EXIT_USAGE)


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


def operator_parser(
    prog: str, description: str, *, url_help: str
) -> tuple[argparse.ArgumentParser, Callable[[str, str], argparse.ArgumentParser]]:
    """An operator CLI's parser with `--url`, and how to add a subcommand to it (each
    with `--json`)."""
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--url", help=url_help)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        one = sub.add_parser(name, help=help)
        one.add_argument("--json", action="store_true", help="print the API's JSON")
        return one

    return parser, command


@dataclass(frozen=True)
class OperatorCli:
    """The `main` of an operator CLI: its parser and its commands."""

    build_parser: Callable[[], argparse.ArgumentParser]
    commands: Mapping[str, Command]

    def __call__(
        self,
        argv: Sequence[str] | None = None,
        *,
        environ: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> int:
        """Parse `argv`, find the API and the token, run the command; its exit code, or a
        one-line error on stderr (`<prog>: ...`) and that error's code. `environ`,
        `transport` and the streams default to the process's (tests inject theirs)."""
        out = out or sys.stdout
        err = err or sys.stderr
        env = dict(os.environ if environ is None else environ)
        parser = self.build_parser()
        try:
            args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
            base_url = _base_url(args.url, env)
            token = _token(env)
            with httpx.Client(
                base_url=base_url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=TIMEOUT_SECONDS,
                transport=transport,
            ) as http:
                return self.commands[args.command](Api(http), args, Io(out, err))
        except CliError as exc:
            err.write(f"{parser.prog}: {exc}\n")
            return exc.code
        except SystemExit as exc:  # --help
            return int(exc.code or 0)


# -- output -------------------------------------------------------------------------------------


def print_json(out: TextIO, value: Any) -> None:
    out.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def print_table(out: TextIO, header: list[str], rows: list[list[Any]]) -> None:
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
