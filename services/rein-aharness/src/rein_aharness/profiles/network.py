"""A sandbox profile's network allowlist: `host:port` entries, parsed strictly (pure).

`network: {allow: ["api.provider.example:443", "10.0.0.7:8443", "[2001:db8::7]:443"]}`.
A host is a DNS name (lowercase letters, digits and hyphens, labels of 1-63, 253 in all,
a final label that is not all digits, so `1.2.3` is never read as an address by some
resolver) or an IP literal (IPv6 in brackets, in its canonical compressed form); a port
is 1-65535 written without leading zeros. Entries are unique and at most
`MAX_ALLOW_ENTRIES`. Anything else is refused when the catalogue loads, never repaired:
the egress proxy compares what a request names with exactly these entries.

Only an IP literal may name a loopback, link-local or private address: a name is
resolved by the proxy, and what it resolves to is decided elsewhere (see
sandbox/egress_policy.py for why).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = [
    "MAX_ALLOW_ENTRIES",
    "EgressTarget",
    "IPAddress",
    "parse_host",
    "parse_port",
    "parse_target",
    "target_error",
]

MAX_ALLOW_ENTRIES = 64
_MAX_NAME_CHARS = 253
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
_IPV4 = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class EgressTarget:
    """One allowed destination; `literal` is set when the host is an IP literal."""

    host: str  # the name, or the address without brackets
    port: int
    literal: IPAddress | None

    def __str__(self) -> str:
        host = f"[{self.host}]" if isinstance(self.literal, ipaddress.IPv6Address) else self.host
        return f"{host}:{self.port}"


def parse_port(text: str) -> int | None:
    if not _PORT.fullmatch(text):
        return None
    port = int(text)
    return port if port <= 65535 else None


def parse_host(text: str) -> tuple[str, IPAddress | None] | None:
    """A host as a request or an allowlist writes it (IPv6 in brackets); None if invalid."""
    if text.startswith("[") and text.endswith("]"):
        try:
            v6 = ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            return None
        # Only the canonical form, so that one address has one spelling on the list.
        return (text[1:-1], v6) if v6.compressed == text[1:-1] and "%" not in text else None
    if _IPV4.fullmatch(text):
        try:
            v4 = ipaddress.IPv4Address(text)
        except ValueError:
            return None
        return text, v4
    if len(text) > _MAX_NAME_CHARS:
        return None
    labels = text.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels) or labels[-1].isdigit():
        return None
    return text, None


def parse_target(text: str) -> EgressTarget | None:
    host, sep, port_text = text.rpartition(":")
    if not sep:
        return None
    port = parse_port(port_text)
    parsed = parse_host(host)
    if port is None or parsed is None:
        return None
    return EgressTarget(parsed[0], port, parsed[1])


def target_error(text: str) -> str | None:
    """Why `text` is not an allowlist entry, or None."""
    if parse_target(text) is None:
        return (
            f"{text[:80]!r} is not host:port (a lowercase DNS name, an IPv4 literal or a "
            "bracketed canonical IPv6 literal, and a port 1-65535)"
        )
    return None
