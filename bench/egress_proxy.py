"""What the egress proxy costs, against a direct connection measured in the same run.

    uv run python bench/egress_proxy.py [--requests 300] [--mib 64]

A stand-in provider on 127.0.0.1 answers a small HTTP request and, on `/bulk`, streams
`--mib` MiB. Each measurement is taken both ways, alternating so that machine noise falls
on both alike:

* direct: a TCP connection to the provider;
* proxied: a connection to the worker's egress proxy (egress_proxy.py, its Unix socket,
  with the provider listed as `127.0.0.1:<port>`), a CONNECT, then the same bytes.

Per request: a fresh connection, one small GET and its answer (the CONNECT round trip,
the policy check and the upstream connect are all in it). Per MiB: the bulk transfer's
time divided by its size. Prints medians and ratios to direct. The in-sandbox relay
(egress_relay.py) adds its own hop, not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time

from rein_aharness.profiles.network import parse_target
from rein_aharness.sandbox.egress_log import EgressLog
from rein_aharness.sandbox.egress_policy import EgressPolicy
from rein_aharness.sandbox.egress_proxy import egress_proxy

MIB = 1024 * 1024
_SMALL = b"GET /small HTTP/1.1\r\nHost: provider\r\n\r\n"
_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def _provider(bulk_mib: int) -> asyncio.Server:
    block = b"x" * MIB

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"GET /bulk"):
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {bulk_mib * MIB}\r\n\r\n".encode())
            for _ in range(bulk_mib):
                writer.write(block)
                await writer.drain()
        else:
            writer.write(_ANSWER)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _open(port: int, proxy: str | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if proxy is None:
        return await asyncio.open_connection("127.0.0.1", port)
    reader, writer = await asyncio.open_unix_connection(proxy)
    writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return reader, writer


async def _request(port: int, proxy: str | None, request: bytes) -> tuple[float, int]:
    started = time.perf_counter()
    reader, writer = await _open(port, proxy)
    writer.write(request)
    received = 0
    while chunk := await reader.read(256 * 1024):
        received += len(chunk)
    writer.close()
    return time.perf_counter() - started, received


async def main(requests: int, mib: int) -> None:
    provider = await _provider(mib)
    port = provider.sockets[0].getsockname()[1]
    target = parse_target(f"127.0.0.1:{port}")
    assert target is not None
    log = EgressLog()
    small: dict[str, list[float]] = {"direct": [], "proxied": []}
    bulk: dict[str, list[float]] = {"direct": [], "proxied": []}
    bulk_request = b"GET /bulk HTTP/1.1\r\nHost: provider\r\n\r\n"
    async with egress_proxy(EgressPolicy([target]), log) as socket_path:
        proxy = os.fspath(socket_path)
        for _ in range(10):  # warm up both paths
            await _request(port, None, _SMALL)
            await _request(port, proxy, _SMALL)
        for _ in range(requests):
            for name, via in (("direct", None), ("proxied", proxy)):
                seconds, _ = await _request(port, via, _SMALL)
                small[name].append(seconds)
        for _ in range(5):
            for name, via in (("direct", None), ("proxied", proxy)):
                seconds, received = await _request(port, via, bulk_request)
                assert received > mib * MIB
                bulk[name].append(seconds / mib)
    provider.close()
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cpus; "
        f"{requests} small requests and 5 x {mib} MiB each way, alternating"
    )
    d, p = statistics.median(small["direct"]), statistics.median(small["proxied"])
    print(
        f"per request: direct {d * 1e3:.3f} ms, proxied {p * 1e3:.3f} ms, "
        f"overhead {(p - d) * 1e3:.3f} ms, ratio {p / d:.2f}"
    )
    d, p = statistics.median(bulk["direct"]), statistics.median(bulk["proxied"])
    print(
        f"per MiB:     direct {d * 1e3:.3f} ms ({1 / d:.0f} MiB/s), proxied {p * 1e3:.3f} ms "
        f"({1 / p:.0f} MiB/s), overhead {(p - d) * 1e3:.3f} ms, ratio {p / d:.2f}"
    )
    print(
        f"counted by the proxy: {log.counts['allowed']} allowed, "
        f"{log.bytes_down / MIB:.1f} MiB down"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--mib", type=int, default=64)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.requests, arguments.mib))
