"""Git's credential helper for a git call to a remote: `python -I -m <this module> get`.

The worker's mirror fetch (rein_aharness/repository/mirror.py) and activity-core's
publication (activity_core/publication/remote_git.py) configure it, after resetting
`credential.helper`, for their own git calls to the remote alone. It answers with the user
name and the token read from the file named by TOKEN_FILE_VARIABLE, and only for the
remote's own protocol and host (ORIGIN_VARIABLE), so a redirect or a URL elsewhere never
receives it. Those variables are set in that one git process's environment and hold a
path, never the token: no argv, no config file, no approach, no log line and no row ever
holds it; git passes it on to the remote over its connection and nowhere else. `store`
and `erase` are accepted and ignored (the file is the one source). Standard library only
and imported by nothing at start, so `-m` runs it quickly and cleanly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

__all__ = [
    "MODULE",
    "ORIGIN_VARIABLE",
    "TOKEN_FILE_VARIABLE",
    "USERNAME_VARIABLE",
    "answer",
    "main",
    "read_token",
]

# What a git call's `credential.helper` runs: `!<python> -I -m <MODULE>`.
MODULE = "ops_runtime.git_credential_helper"
# Set in that one git process's environment; they hold a path and names, never the token.
ORIGIN_VARIABLE = "OPS_GIT_CREDENTIAL_ORIGIN"  # "<protocol>://<host[:port]>"
TOKEN_FILE_VARIABLE = "OPS_GIT_CREDENTIAL_TOKEN_FILE"
USERNAME_VARIABLE = "OPS_GIT_CREDENTIAL_USERNAME"
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
