"""CPU per request of the HTTP protocol `serve` runs, against the one it ran before
bounded requests, in one run.

    uv run python bench/protocol_overhead.py [--requests 20000] [--rounds 9]

Feeds a worker's claim request (the headers the bench's load generator sends, an 80-byte
body) to one protocol instance per variant, on uvloop, with a transport that drops what is
written and an app that answers `{}` at once, so what differs is the protocol alone.
Variants, in turn within each round (the order alternating between rounds); the median
and the minimum of the rounds:

* before: one-write answers alone (OneWriteHttpToolsProtocol), uvicorn's proxy headers
  on with 127.0.0.1 trusted (its default): the baseline;
* serve: `serve.uvicorn_config` as it is (api_protocol.py: bounded requests over
  one-write answers; forwarded headers off unless ACTIVITY_CORE_TRUSTED_PROXIES lists a
  proxy);
* serve, a trusted proxy: the same with ACTIVITY_CORE_TRUSTED_PROXIES=127.0.0.1.

The whole of a claim+complete cycle through the API is about 600 µs of API CPU
(bench/claim_throughput.py), two requests of it here. (The one write's own gain, fewer
send() calls, does not show here: the transport drops what it is given.)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

import uvicorn
import uvloop
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from activity_core.one_write_answers import OneWriteHttpToolsProtocol
from activity_core.serve import Listen, uvicorn_config

REQUEST = (
    b"POST /ops-runs/claim HTTP/1.1\r\n"
    b"host: 127.0.0.1:8080\r\n"
    b"content-type: application/json\r\n"
    b"authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789ab\r\n"
    b"content-length: 80\r\n\r\n" + b" " * 80
)


class DroppingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self._closing = False

    def write(self, data: Any) -> None:
        pass

    def close(self) -> None:
        self._closing = True

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def answer(scope: Scope, receive: Receive, send: Send) -> None:
    await receive()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


def configs() -> dict[str, uvicorn.Config]:
    listen = Listen("127.0.0.1", 0)
    before = uvicorn_config(answer, listen)
    before.http = OneWriteHttpToolsProtocol
    before.proxy_headers = True
    before.forwarded_allow_ips = ["127.0.0.1", "::1"]
    return {
        "before": before,
        "serve": uvicorn_config(answer, listen),
        "serve, a trusted proxy": uvicorn_config(answer, listen, ("127.0.0.1",)),
    }


async def microseconds_per_request(config: uvicorn.Config, requests: int) -> float:
    if not config.loaded:
        config.load()
    loop = asyncio.get_running_loop()
    protocol = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=ServerState(), app_state={}, _loop=loop
    )
    protocol.connection_made(DroppingTransport())
    started = time.perf_counter()
    for _ in range(requests):
        protocol.data_received(REQUEST)
        # the app's task, the answer and the one-write flush
        for _ in range(4):
            await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    protocol.connection_lost(None)
    return elapsed / requests * 1e6


async def run(requests: int, rounds: int) -> dict[str, list[float]]:
    variants = configs()
    figures: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for number in range(rounds):
        for name in names if number % 2 == 0 else reversed(names):
            figures[name].append(await microseconds_per_request(variants[name], requests))
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    if args.requests < 1 or args.rounds < 1:
        parser.error("--requests and --rounds must be at least 1")
    figures = uvloop.run(run(args.requests, args.rounds))
    baseline = statistics.median(figures["before"])
    print(f"{args.requests} requests per variant and round, {args.rounds} rounds (uvloop)")
    for name, values in figures.items():
        median = statistics.median(values)
        print(
            f"  {name:24s} median {median:6.2f} µs/request  min {min(values):6.2f}  "
            f"{median / baseline:.3f}x before"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
