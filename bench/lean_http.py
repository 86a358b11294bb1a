"""A minimal HTTP/1.1 keep-alive client for load generation (benchmarks only).

The claim benchmark runs its load generator on the same two cores as the API server and
PostgreSQL. httpx costs about 2-4 ms of CPU per claim+complete cycle, more than the API
itself, so with httpx the benchmark mostly measures its own client. This client does only
what a load generator needs: one connection per worker, one request at a time on it,
pre-built request bytes, a response with Content-Length (every JSON answer of the API has
one). Anything else (chunked bodies, 1xx, pipelining) is refused, not guessed at.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


class LeanHttpError(OSError):
    """The connection failed or the server answered something this client does not read."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes


_HEADER_END = b"\r\n\r\n"


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Response] | None = None
        self._status = 0
        self._length = -1  # body length once the head is read; -1 while reading the head
        self._keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(LeanHttpError(f"connection lost: {exc}"))

    def expect(self, waiter: asyncio.Future[Response]) -> None:
        self._waiter = waiter
        self._buffer.clear()
        self._length = -1

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._length < 0:
            end = self._buffer.find(_HEADER_END)
            if end < 0:
                return
            try:
                self._read_head(bytes(self._buffer[:end]))
            except LeanHttpError as exc:
                self._fail(exc)
                return
            del self._buffer[: end + len(_HEADER_END)]
        if len(self._buffer) < self._length:
            return
        if len(self._buffer) > self._length:
            self._fail(LeanHttpError("more bytes than Content-Length (pipelining is not used)"))
            return
        waiter, self._waiter = self._waiter, None
        response = Response(self._status, bytes(self._buffer))
        self._buffer.clear()
        self._length = -1
        if not self._keep_alive and self.transport is not None:
            self.closed = True
            self.transport.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or parts[0] != b"HTTP/1.1" or not parts[1].isdigit():
            raise LeanHttpError(f"unreadable status line {lines[0][:80]!r}")
        self._status = int(parts[1])
        length = -1
        self._keep_alive = True
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            if key == b"content-length":
                length = int(value.strip())
            elif key == b"connection" and value.strip().lower() == b"close":
                self._keep_alive = False
            elif key == b"transfer-encoding":
                raise LeanHttpError("Transfer-Encoding is not supported by this client")
        if length < 0:
            raise LeanHttpError("the response has no Content-Length")
        self._length = length

    def _fail(self, exc: LeanHttpError) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()
        self.closed = True


class LeanConnection:
    """One worker's connection: reconnects when the server closed it while idle."""

    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self._host = host
        self._port = port
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._host_header = f"Host: {host}:{port}\r\n".encode()

    def build(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        """The request's bytes, built once by callers that send the same request often."""
        head = [f"{method} {path} HTTP/1.1\r\n".encode(), self._host_header]
        head += [f"{k}: {v}\r\n".encode() for k, v in headers.items()]
        head.append(f"Content-Length: {len(body)}\r\n\r\n".encode())
        return b"".join(head) + body

    async def send(self, request: bytes) -> Response:
        protocol = self._protocol
        if protocol is None or protocol.closed:
            loop = asyncio.get_running_loop()
            try:
                transport, protocol = await loop.create_connection(
                    _Protocol, self._host, self._port
                )
            except OSError as exc:
                raise LeanHttpError(f"connect: {exc}") from exc
            # uvloop may call connection_made after create_connection has returned.
            protocol.transport = transport
            self._protocol = protocol
        assert protocol.transport is not None
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        protocol.expect(waiter)
        protocol.transport.write(request)
        try:
            return await asyncio.wait_for(waiter, self._timeout)
        except TimeoutError as exc:
            self.close()
            raise LeanHttpError(f"no answer within {self._timeout} s") from exc

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            with contextlib.suppress(RuntimeError):
                self._protocol.transport.close()
        self._protocol = None
