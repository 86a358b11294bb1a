"""`network_egress`: what the sandbox's network did, as bounded evidence.

    {"mode": "allowlist", "allowed": 3, "refused": 1, "failed": 0,
     "bytes_up": 812, "bytes_down": 40211,
     "destinations": [{"host": "api.provider.example", "port": 443, "outcome": "allowed",
                       "connections": 3, "bytes_up": 812, "bytes_down": 40211}, ...]}

`mode` is `open` (the profile's `network: true`: the host's network, nothing counted, so
no counts are claimed) or `allowlist` (every connection went through the worker's egress
proxy, which counted it). A destination is one (host, port, outcome, reason) with its
connection count and bytes; `reason` says why a refused or failed one was not relayed.
A `host` is what the approach asked for only if it is a host name or an address at all,
lowercase ASCII without brackets; otherwise the destination has no host.

The whole value is at most MAX_NETWORK_EGRESS_BYTES encoded: destinations past that are
dropped from the end (the totals still count them). The 64 KiB arithmetic of
normalize.py includes this field at that size.
"""

from __future__ import annotations

import re

from ops_evidence.bounds import JsonValue, encoded_size
from ops_evidence.fields import non_negative_int, one_of

__all__ = [
    "EGRESS_MODES",
    "EGRESS_OUTCOMES",
    "EGRESS_REASONS",
    "MAX_EGRESS_DESTINATIONS",
    "MAX_NETWORK_EGRESS_BYTES",
    "network_egress",
]

MAX_NETWORK_EGRESS_BYTES = 1280
MAX_EGRESS_DESTINATIONS = 16
EGRESS_MODES = frozenset({"open", "allowlist"})
EGRESS_OUTCOMES = frozenset({"allowed", "refused", "failed"})
EGRESS_REASONS = frozenset(
    {
        "not_listed",  # host:port is not on the profile's allowlist
        "forbidden_address",  # a listed name resolved to loopback, private, link-local...
        "unresolvable",  # a listed name did not resolve (in time)
        "bad_request",  # not a CONNECT or an absolute http:// request within the bounds
        "too_many_connections",  # the proxy's concurrency bound
        "connect_failed",  # the vetted address refused or was unreachable
        "connect_timeout",  # the vetted address did not answer in time
    }
)
_HOST = re.compile(r"[a-z0-9.:-]{1,253}")
_COUNTS = ("allowed", "refused", "failed", "bytes_up", "bytes_down")
_DESTINATION_COUNTS = ("connections", "bytes_up", "bytes_down")


def _host(value: object) -> str | None:
    return value if type(value) is str and _HOST.fullmatch(value) else None


def _port(value: object) -> int | None:
    return value if type(value) is int and 1 <= value <= 65535 else None


def _destination(raw: object) -> dict[str, JsonValue] | None:
    if type(raw) is not dict:
        return None
    outcome = one_of(raw.get("outcome"), EGRESS_OUTCOMES)
    if outcome is None:
        return None
    kept: dict[str, JsonValue] = {"outcome": outcome}
    for key, validate in (("host", _host), ("port", _port)):
        value = validate(raw.get(key))
        if value is not None:
            kept[key] = value
    reason = one_of(raw.get("reason"), EGRESS_REASONS)
    if reason is not None and outcome != "allowed":
        kept["reason"] = reason
    for key in _DESTINATION_COUNTS:
        count = non_negative_int(raw.get(key))
        if count is not None:
            kept[key] = count
    return kept


def network_egress(raw: object) -> dict[str, JsonValue] | None:
    """The allowlisted, bounded `network_egress`; None without a valid `mode`."""
    if type(raw) is not dict:
        return None
    # Exact-str keys of an exact dict only: `raw.get` on a foreign key type would run
    # that key's `__eq__` (see normalize._string_keyed).
    source = {key: value for key, value in raw.items() if type(key) is str}
    mode = one_of(source.get("mode"), EGRESS_MODES)
    if mode is None:
        return None
    kept: dict[str, JsonValue] = {"mode": mode}
    for key in _COUNTS:
        count = non_negative_int(source.get(key))
        if count is not None:
            kept[key] = count
    destinations = source.get("destinations")
    if type(destinations) is list:
        cleaned: list[JsonValue] = []
        for item in destinations[:MAX_EGRESS_DESTINATIONS]:
            entry = _destination(
                {k: v for k, v in item.items() if type(k) is str} if type(item) is dict else None
            )
            if entry is not None:
                cleaned.append(entry)
        kept["destinations"] = cleaned
        # Worst case a destination is ~370 bytes; drop from the end until it fits.
        while cleaned and encoded_size(kept) > MAX_NETWORK_EGRESS_BYTES:
            cleaned.pop()
    return kept
