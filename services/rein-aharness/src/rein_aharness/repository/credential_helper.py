"""Git's credential helper for the mirror's fetch: `python -I -m <this module> get`.

The worker's git runs it (mirror.py configures it for the fetch alone, after resetting
`credential.helper`), and it answers with the user name and the token read from the file
named by `TOKEN_FILE_VARIABLE`, and only for the remote's own protocol and host
(`ORIGIN_VARIABLE`), so a redirect or a URL elsewhere never receives it. Those variables
are set in that one git process's environment: no approach, no other git call and no
file the worker writes ever holds the token; git passes it on to the remote over its
connection and nowhere else. `store` and `erase` are accepted and ignored (the file is
the one source). It reads no setting of the worker's. The package imports nothing of this module (so
`-m` runs it cleanly); the variables' names live in remote.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

from rein_aharness.repository.remote import (
    ORIGIN_VARIABLE,
    TOKEN_FILE_VARIABLE,
    USERNAME_VARIABLE,
)

__all__ = ["answer", "main"]

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


def _token(path: str) -> str | None:
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
    token = _token(path) if path else None
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
