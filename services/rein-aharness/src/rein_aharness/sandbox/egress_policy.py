"""Which destination the egress proxy may connect to, and at which address (no I/O but
the injected resolver).

Order of refusals, first match wins:

1. the request names no valid host:port (`bad_request`);
2. host:port is not on the profile's allowlist, compared exactly, host lowercased since
   DNS names are case-insensitive (`not_listed`);
3. a listed IP literal is connected to as written, even a loopback or private one: the
   operator wrote that address, nothing can change what it means; only the unspecified
   address and multicast are refused, which are not one peer (`forbidden_address`);
4. a listed name is resolved by the worker (the sandbox has no DNS); no answer within
   `RESOLVE_TIMEOUT_SECONDS` is `unresolvable`; if any address it resolves to is not a
   public unicast address (loopback, RFC 1918, CGNAT, link-local, ULA, unspecified,
   multicast, reserved, documentation, or an IPv6 form that embeds such an IPv4) the
   name is refused whole (`forbidden_address`).

Why a name never reaches an internal address, even a listed one: what a name resolves to
is decided by whoever controls its DNS, at request time; an allowlist entry
`api.provider.example:443` says "that provider", not "whatever 10.x host its DNS names
today" (DNS rebinding, a hijacked zone, a split-horizon resolver that answers with the
cluster's own services). An operator who really means an internal peer lists its
address. A name with one bad address is refused whole, rather than filtered, because a
provider whose DNS mixes in internal addresses is misconfigured or hostile either way.

The proxy then connects to the addresses vetted here and to nothing else: there is no
second resolution between the check and the connect.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from ops_contracts.egress import EgressReason
from rein_aharness.profiles.network import EgressTarget, IPAddress, parse_host, parse_port

__all__ = [
    "RESOLVE_TIMEOUT_SECONDS",
    "Allowed",
    "EgressPolicy",
    "Refused",
    "Resolver",
    "address_is_public",
    "parse_authority",
    "system_resolver",
]

RESOLVE_TIMEOUT_SECONDS = 5.0
_MAX_ADDRESSES = 16

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


@dataclass(frozen=True)
class Allowed:
    host: str
    port: int
    addresses: tuple[IPAddress, ...]  # vetted, in the resolver's order


@dataclass(frozen=True)
class Refused:
    reason: EgressReason
    host: str | None = None
    port: int | None = None


def parse_authority(text: str) -> tuple[str, int] | None:
    """`host:port` of a CONNECT request or an absolute URI, the host lowercased."""
    host, sep, port_text = text.rpartition(":")
    port = parse_port(port_text) if sep else None
    parsed = parse_host(host.lower()) if port is not None else None
    if parsed is None or port is None:
        return None
    return parsed[0], port


def address_is_public(address: IPAddress) -> bool:
    """A global unicast address, looking through the IPv6 forms that embed an IPv4."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return address_is_public(embedded)
        if address.teredo is not None or address in _NAT64:
            return False
    return address.is_global and not address.is_multicast


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The worker's own resolver (getaddrinfo), TCP addresses only."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    found: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        # Scoped IPv6 (`fe80::1%eth0`) is link-local anyway: its scope is cut and it is
        # refused as such.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    return found


class EgressPolicy:
    """The allowlist of one sandbox profile, and the resolver names are vetted with."""

    def __init__(self, targets: Iterable[EgressTarget], resolver: Resolver = system_resolver):
        self._targets = {(t.host, t.port): t for t in targets}
        self._resolve = resolver

    async def vet(self, authority: str) -> Allowed | Refused:
        parsed = parse_authority(authority)
        if parsed is None:
            return Refused("bad_request")
        host, port = parsed
        target = self._targets.get((host, port))
        if target is None:
            return Refused("not_listed", host, port)
        if target.literal is not None:
            if target.literal.is_unspecified or target.literal.is_multicast:
                return Refused("forbidden_address", host, port)
            return Allowed(host, port, (target.literal,))
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_SECONDS):
                addresses = await self._resolve(host, port)
        except (OSError, TimeoutError, UnicodeError, ValueError):
            return Refused("unresolvable", host, port)
        if not addresses:
            return Refused("unresolvable", host, port)
        if not all(address_is_public(a) for a in addresses):
            return Refused("forbidden_address", host, port)
        return Allowed(host, port, tuple(addresses[:_MAX_ADDRESSES]))
