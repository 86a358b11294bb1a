"""The allowlist's parsing and the egress proxy's address policy (injected resolver)."""

from __future__ import annotations

import asyncio
import ipaddress
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from rein_aharness.profiles.model import SandboxProfile
from rein_aharness.profiles.network import IPAddress, parse_target
from rein_aharness.sandbox.egress_log import EgressLog
from rein_aharness.sandbox.egress_policy import (
    Allowed,
    EgressPolicy,
    Refused,
    address_is_public,
)
from rein_aharness.sandbox.egress_proxy import ProxyLimits, egress_proxy


@pytest.mark.parametrize(
    "entry",
    ["api.provider.example:443", "a:1", "10.0.0.7:65535", "[2001:db8::7]:443", "x-y.z9:80"],
)
def test_valid_entries(entry: str) -> None:
    assert parse_target(entry) is not None
    SandboxProfile.model_validate({"kind": "bwrap", "network": {"allow": [entry]}})


@pytest.mark.parametrize(
    "entry",
    [
        "api.example",  # no port
        "api.example:0",
        "api.example:65536",
        "api.example:0443",
        "API.example:443",  # lowercase only
        "1.2.3:80",  # numeric final label: some resolvers read it as an address
        "256.1.1.1:80",
        "[2001:DB8::7]:443",  # not canonical
        "[2001:db8:0::7]:443",
        "[fe80::1%eth0]:443",
        "::1:443",  # IPv6 without brackets
        "user@host:443",
        "-a.example:443",
        "a..example:443",
        ("a" * 64) + ".example:443",
        "host :443",
        "",
    ],
)
def test_invalid_entries_are_refused_at_load(entry: str) -> None:
    assert parse_target(entry) is None
    with pytest.raises(ValidationError):
        SandboxProfile.model_validate({"kind": "bwrap", "network": {"allow": [entry]}})


@pytest.mark.parametrize(
    "network",
    [
        {"allow": []},
        {"allow": ["a.example:1", "a.example:1"]},
        {"allow": ["[::1]:1", "[::1]:1"]},
        {"allow": [f"h{i}.example:1" for i in range(65)]},
        {"allow": ["a.example:1"], "deny": []},
        {"allow": "a.example:1"},
        1,
        "true",
    ],
)
def test_invalid_allowlists_are_refused(network: object) -> None:
    with pytest.raises(ValidationError):
        SandboxProfile.model_validate({"kind": "bwrap", "network": network})


def test_kind_none_takes_no_allowlist() -> None:
    with pytest.raises(ValidationError):
        SandboxProfile.model_validate({"kind": "none", "network": {"allow": ["a.b:1"]}})


@given(st.text(max_size=40))
def test_any_text_parses_or_is_refused_never_raises(text: str) -> None:
    target = parse_target(text)
    if target is not None:
        assert str(target) == text  # what is on the list is what was written


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("100.64.0.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("255.255.255.255", False),
        ("192.0.2.1", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fd00::1", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("64:ff9b::a00:1", False),  # NAT64 of 10.0.0.1
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # Teredo
    ],
)
def test_address_policy(address: str, public: bool) -> None:
    assert address_is_public(ipaddress.ip_address(address)) is public


def _resolver(answers: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    calls: list[str] = []

    async def resolve(host: str, port: int) -> list[IPAddress]:
        calls.append(host)
        if host not in answers:
            raise OSError("no such name")
        return [ipaddress.ip_address(a) for a in answers[host]]

    return resolve, calls


async def test_names_resolving_to_internal_addresses_are_refused_whole() -> None:
    resolve, calls = _resolver(
        {
            "public.example": ["93.184.216.34"],
            "rebound.example": ["93.184.216.34", "10.0.0.5"],
            "internal.example": ["192.168.0.2"],
            "empty.example": [],
        }
    )
    targets = [
        parse_target(t)
        for t in (
            "public.example:443",
            "rebound.example:443",
            "internal.example:443",
            "empty.example:443",
            "gone.example:443",
            "10.0.0.5:8443",
            "0.0.0.0:80",
        )
    ]
    policy = EgressPolicy([t for t in targets if t is not None], resolve)
    assert await policy.vet("Public.Example:443") == Allowed(
        "public.example", 443, (ipaddress.ip_address("93.184.216.34"),)
    )
    assert await policy.vet("rebound.example:443") == Refused(
        "forbidden_address", "rebound.example", 443
    )
    assert await policy.vet("internal.example:443") == Refused(
        "forbidden_address", "internal.example", 443
    )
    assert (await policy.vet("empty.example:443")).reason == "unresolvable"  # type: ignore[union-attr]
    assert (await policy.vet("gone.example:443")).reason == "unresolvable"  # type: ignore[union-attr]
    # an internal address listed as a literal is allowed, and never resolved
    assert await policy.vet("10.0.0.5:8443") == Allowed(
        "10.0.0.5", 8443, (ipaddress.ip_address("10.0.0.5"),)
    )
    assert (await policy.vet("0.0.0.0:80")).reason == "forbidden_address"  # type: ignore[union-attr]
    assert await policy.vet("public.example:80") == Refused("not_listed", "public.example", 80)
    assert await policy.vet("10.0.0.5:443") == Refused("not_listed", "10.0.0.5", 443)
    for bad in ("public.example", "public.example:x", "[::1:443", "a b:1", "é.example:443"):
        assert await policy.vet(bad) == Refused("bad_request")
    assert "10.0.0.5" not in calls


async def _exchange(path: Path, data: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(os.fspath(path))
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 5)
    writer.close()
    return answer


async def test_the_proxy_refuses_bad_and_oversized_requests_and_bounds_connections() -> None:
    resolve, _ = _resolver({})
    log = EgressLog()
    limits = ProxyLimits(header_bytes=1024, header_timeout=0.5, max_connections=1)
    policy = EgressPolicy([], resolve)
    async with egress_proxy(policy, log, limits) as path:
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        assert (await _exchange(path, b"GET /x HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 400")
        huge = b"CONNECT a:1 HTTP/1.1\r\nX: " + b"y" * 4096 + b"\r\n\r\n"
        assert (await _exchange(path, huge)).startswith(b"HTTP/1.1 400")
        answer = await _exchange(path, b"CONNECT a.example:1 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403") and b"not_listed" in answer
        # one slow client holds the only slot; the next is turned away at once
        _, slow = await asyncio.open_unix_connection(os.fspath(path))
        await asyncio.sleep(0.05)
        assert (await _exchange(path, b"CONNECT a:1 HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 503")
        await asyncio.sleep(0.7)  # the slow one times out on its header
        slow.close()
    assert not path.exists() and not path.parent.exists()
    assert log.counts == {"allowed": 0, "refused": 5, "failed": 0}
    reasons = [d.reason for d in log.evidence().destinations or []]
    assert sorted(r or "" for r in reasons) == [
        "bad_request",
        "not_listed",
        "too_many_connections",
    ]


def test_the_log_keeps_exact_totals_and_a_bounded_set_of_destinations() -> None:
    from rein_aharness.sandbox.egress_log import MAX_DESTINATIONS, ConnectionRecord

    seen: list[ConnectionRecord] = []
    log = EgressLog(seen.append)
    for i in range(1000):
        log.record(ConnectionRecord("refused", "not_listed", f"h{i}.example", 443))
    log.record(ConnectionRecord("allowed", None, "a.example", 443, bytes_up=2**60, bytes_down=1))
    evidence = log.evidence()
    assert (evidence.refused, evidence.allowed, len(seen)) == (1000, 1, 1001)
    assert len(evidence.destinations or []) == MAX_DESTINATIONS
    assert evidence.bytes_up == 2**53 - 1  # clipped to the evidence's integer bound
