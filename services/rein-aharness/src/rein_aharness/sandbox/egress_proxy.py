"""The worker's egress proxy for one attempt: HTTP CONNECT (and plain `http://` requests)
on a Unix socket that only that attempt's sandbox sees.

    async with egress_proxy(policy, log) as socket_path:
        ... bind socket_path into the sandbox, run the approach ...

Why a proxy outside the sandbox, on a Unix socket: a sandbox with an allowlist keeps its
own empty network namespace (loopback only), so nothing it does with sockets reaches any
host; the one way out is this socket, bound into it. Every decision is taken here, in the
worker, where the approach cannot change it: the proxy parses the request, vets the
destination (egress_policy.py: allowlist, its own resolution, address classes) and
connects to the vetted address itself. TLS stays end to end (CONNECT relays bytes), so
the proxy sees host and port, never content or credentials.

Per connection, in order: at most `max_connections` at once (more are answered 503,
`too_many_connections`); the request head within `header_bytes` and `header_timeout`
(else 400, `bad_request`); a refused destination gets 403 with the reason in
`X-Rein-Egress-Refused`; the connect to each vetted address in turn within
`connect_timeout` (502 `connect_failed`, 504 `connect_timeout`); then the bytes are
relayed both ways until both sides end or neither moved for `idle_timeout`. A plain
`GET http://host:port/path` is rewritten to origin form with `Connection: close` and
its `Proxy-*` headers dropped; whatever else the client sends on that connection goes
to the same vetted destination.

Every connection is recorded once, when it ends, however it ends (egress_log.py). The
socket lives in a fresh 0700 directory under the system temporary directory (short, so
the path fits a socket address; never inside the worktree); leaving the context closes
the server, cancels every relay, and removes the socket and its directory, also when
the attempt was killed or cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from rein_aharness.sandbox.egress_log import ConnectionRecord, EgressLog
from rein_aharness.sandbox.egress_policy import Allowed, EgressPolicy, Refused

__all__ = ["ProxyLimits", "egress_proxy"]

_CHUNK = 64 * 1024
_DROPPED_HEADERS = (b"proxy-connection:", b"proxy-authorization:", b"connection:", b"keep-alive:")


@dataclass(frozen=True)
class ProxyLimits:
    header_bytes: int = 16 * 1024
    header_timeout: float = 10.0
    connect_timeout: float = 10.0
    idle_timeout: float = 300.0
    max_connections: int = 32


class _BadRequest(Exception):
    pass


@dataclass(frozen=True)
class _Request:
    authority: str
    forward: bytes | None  # the rewritten head of a plain HTTP request; None: CONNECT


def _parse_head(head: bytes) -> _Request:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise _BadRequest
    method, target, version = parts
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        raise _BadRequest from None
    if not method.isalpha() or not method.isupper():
        raise _BadRequest
    if method == b"CONNECT":
        return _Request(text, None)
    if not text.startswith("http://"):
        raise _BadRequest
    rest = text[len("http://") :]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:] or "/"
    if "@" in authority or not path.startswith(("/", "?")):
        raise _BadRequest
    if ":" not in authority.rsplit("]", 1)[-1]:
        authority += ":80"
    headers = [line for line in lines[1:] if line and not line.lower().startswith(_DROPPED_HEADERS)]
    path = path if path.startswith("/") else "/" + path
    forward = b"\r\n".join(
        [method + b" " + path.encode() + b" " + version, *headers, b"Connection: close", b"", b""]
    )
    return _Request(authority, forward)


class _Activity:
    def __init__(self) -> None:
        self.last = time.monotonic()

    def idle_for(self) -> float:
        return time.monotonic() - self.last


class _Proxy:
    def __init__(self, policy: EgressPolicy, log: EgressLog, limits: ProxyLimits) -> None:
        self._policy = policy
        self._log = log
        self._limits = limits
        self._active = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        record = ConnectionRecord("refused", "bad_request")
        try:
            if self._active >= self._limits.max_connections:
                record.reason = "too_many_connections"
                await _answer(writer, 503, "too_many_connections")
                return
            self._active += 1
            try:
                await self._serve(reader, writer, record)
            finally:
                self._active -= 1
        except (OSError, asyncio.IncompleteReadError):
            pass  # the approach went away; the record says how far it got
        except asyncio.CancelledError:
            # The attempt ended (egress_proxy's exit): this task is its own top level,
            # and asyncio's stream callback would report a cancelled one as an error.
            pass
        finally:
            self.tasks.discard(task)
            writer.close()
            self._log.record(record)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: ConnectionRecord
    ) -> None:
        try:
            async with asyncio.timeout(self._limits.header_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
            request = _parse_head(head[:-4])
        except (TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, _BadRequest):
            await _answer(writer, 400, "bad_request")
            return
        decision = await self._policy.vet(request.authority)
        record.host, record.port = decision.host, decision.port
        if isinstance(decision, Refused):
            record.reason = decision.reason
            await _answer(writer, 403, decision.reason)
            return
        upstream = await self._connect(decision, record)
        if upstream is None:
            await _answer(writer, 504 if record.reason == "connect_timeout" else 502, record.reason)
            return
        up_reader, up_writer = upstream
        record.outcome, record.reason = "allowed", None
        try:
            if request.forward is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(request.forward)
                record.bytes_up += len(request.forward)
            await self._relay(reader, writer, up_reader, up_writer, record)
        finally:
            up_writer.close()

    async def _connect(
        self, decision: Allowed, record: ConnectionRecord
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        record.outcome, record.reason = "failed", "connect_failed"
        for address in decision.addresses:
            try:
                async with asyncio.timeout(self._limits.connect_timeout):
                    # The vetted address itself, never the name again (no rebinding).
                    return await asyncio.open_connection(str(address), decision.port)
            except TimeoutError:
                record.reason = "connect_timeout"
            except OSError:
                record.reason = "connect_failed"
        return None

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        record: ConnectionRecord,
    ) -> None:
        activity = _Activity()
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer, activity, record, up=True)),
            asyncio.ensure_future(self._pump(up_reader, writer, activity, record, up=False)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        activity: _Activity,
        record: ConnectionRecord,
        *,
        up: bool,
    ) -> None:
        idle = self._limits.idle_timeout
        while True:
            try:
                async with asyncio.timeout(idle):
                    chunk = await source.read(_CHUNK)
            except TimeoutError:
                # Quiet this way while the other way streams is not idle.
                if activity.idle_for() >= idle:
                    raise
                continue
            if not chunk:
                break
            activity.last = time.monotonic()
            if up:
                record.bytes_up += len(chunk)
            else:
                record.bytes_down += len(chunk)
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str | None) -> None:
    text = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Busy"}.get(
        status, "Gateway Timeout"
    )
    body = f"egress refused: {reason}\n".encode()
    writer.write(
        f"HTTP/1.1 {status} {text}\r\nX-Rein-Egress-Refused: {reason}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()


@asynccontextmanager
async def egress_proxy(
    policy: EgressPolicy, log: EgressLog, limits: ProxyLimits | None = None
) -> AsyncIterator[Path]:
    limits = limits or ProxyLimits()
    directory = Path(tempfile.mkdtemp(prefix="rein-egress-"))
    path = directory / "proxy.sock"
    proxy = _Proxy(policy, log, limits)
    server: asyncio.Server | None = None
    try:
        server = await asyncio.start_unix_server(
            proxy.handle, path=os.fspath(path), limit=limits.header_bytes
        )
        os.chmod(path, 0o600)
        yield path
    finally:
        if server is not None:
            server.close()
        for task in list(proxy.tasks):
            task.cancel()
        if proxy.tasks:
            await asyncio.gather(*proxy.tasks, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        shutil.rmtree(directory, ignore_errors=True)
