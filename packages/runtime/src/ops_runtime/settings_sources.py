"""How both services read two kinds of setting the same way: a bind address, and a
secret handed over as a file.

A secret may come from `<VARIABLE>_FILE`, a file whose contents are the value (a mounted
Kubernetes Secret, a Docker secret), one trailing newline dropped. Setting both the
variable and its `_FILE` is refused: which one wins would otherwise be a guess. A message
names the `_FILE` variable and the path, never the contents. Each service turns
`SettingsSourceError` into its own settings error (one line naming the variable).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["MAX_SECRET_FILE_BYTES", "SettingsSourceError", "parse_bind_address", "secret_from_file"]

MAX_SECRET_FILE_BYTES = 64 * 1024


class SettingsSourceError(ValueError):
    """A secret's file cannot be used; the message names its `_FILE` variable."""


def parse_bind_address(text: str) -> tuple[str, int]:
    """`host:port` (`[v6]:port` for an IPv6 literal) as (host, port); ValueError otherwise.
    Port 0 asks the kernel for a free one."""
    host, colon, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or any(ch.isspace() for ch in host):
        raise ValueError("must be host:port")
    if not port.isascii() or not port.isdigit() or int(port) > 65_535:
        raise ValueError("the port must be a number from 0 to 65535")
    return host, int(port)


def secret_from_file(variable: str, environ: Mapping[str, str]) -> str | None:
    """The value the file named by `<variable>_FILE` holds; None when that is unset or
    blank. Raises SettingsSourceError for a file that cannot be read, is empty, larger
    than 64 KiB or not UTF-8, and when `variable` is set (not blank) as well."""
    file_variable = f"{variable}_FILE"
    path = environ.get(file_variable, "").strip()
    if not path:
        return None
    if environ.get(variable, "").strip():
        raise SettingsSourceError(f"{file_variable}: {variable} is set as well; set only one")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SettingsSourceError(f"{file_variable}: cannot read {path} ({reason})") from None
    if len(raw) > MAX_SECRET_FILE_BYTES:
        raise SettingsSourceError(f"{file_variable}: {path} is larger than 64 KiB")
    try:
        value = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise SettingsSourceError(f"{file_variable}: {path} is not UTF-8 text") from None
    if not value.strip():
        raise SettingsSourceError(f"{file_variable}: {path} is empty")
    return value
