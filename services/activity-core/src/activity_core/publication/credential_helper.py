"""Git's credential helper for publication: `python -I -m <this module> get`.

remote_git.py configures it (after resetting `credential.helper`) for its own git calls
to the remote alone. It answers with the user name and the token read from the file
named by TOKEN_FILE_VARIABLE, and only for the remote's own protocol and host
(ORIGIN_VARIABLE), so a redirect or a URL elsewhere never receives it. Those variables
are set in that one git process's environment and hold a path, never the token: no
argv, no config file of the scratch repository, no log line and no row ever holds it.
`store` and `erase` are accepted and ignored (the file is the one source). Written for
activity-core (the worker has its own; the services share no code of this kind).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

__all__ = ["ORIGIN_VARIABLE", "TOKEN_FILE_VARIABLE", "USERNAME_VARIABLE", "answer", "main"]

ORIGIN_VARIABLE = "ACTIVITY_CORE_PUBLISH_ORIGIN"
TOKEN_FILE_VARIABLE = "ACTIVITY_CORE_PUBLISH_TOKEN_FILE"
USERNAME_VARIABLE = "ACTIVITY_CORE_PUBLISH_USERNAME"
_MAX_TOKEN_BYTES = 64 * 1024


def _request(stream: TextIO) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in stream:
        line = line.rstrip("\n")
        if not line:
            break
        key, _, value = line.partition("=")
        fields[key] = value
    return fields


def read_token(path: str) -> str | None:
    """The token in the file at `path` (one trailing newline dropped), None when the file
    cannot be read or holds no single-line token."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_TOKEN_BYTES + 1)
    except OSError:
        return None
    if len(raw) > _MAX_TOKEN_BYTES:
        return None
    try:
        token = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        return None
    if not token or "\n" in token or "\x00" in token:
        return None
    return token


def answer(request: Mapping[str, str], environ: Mapping[str, str]) -> str:
    """What `get` prints for `request` (empty: no answer, git then fails to authenticate)."""
    origin = environ.get(ORIGIN_VARIABLE, "")
    protocol, _, host = origin.partition("://")
    if (
        not protocol
        or request.get("protocol", "").lower() != protocol.lower()
        or request.get("host", "").lower() != host.lower()
    ):
        return ""
    path = environ.get(TOKEN_FILE_VARIABLE, "")
    username = environ.get(USERNAME_VARIABLE, "")
    token = read_token(path) if path else None
    if token is None or not username or "\n" in username:
        return ""
    return f"username={username}\npassword={token}\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["get"]:
        return 0
    sys.stdout.write(answer(_request(sys.stdin), os.environ))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
