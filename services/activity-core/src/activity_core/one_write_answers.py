"""An answer leaves the server in one write: its status line, headers and body together.

uvicorn writes a response's status line and headers when the app sends
`http.response.start`, and its body when the app sends `http.response.body`: two writes,
so two send() calls and, with TCP_NODELAY (uvicorn sets it), two TCP segments, and a
client that wakes twice to read one small answer. Every claim and close answer is one
small JSON body. `OneWriteHttpToolsProtocol` is uvicorn's httptools protocol with its
transport wrapped in `WritesOfAnIteration`: what the protocol writes while the event loop
runs one batch of ready callbacks goes out as one write right after them (`call_soon`), in
the order written. Measured with bench/claim_throughput.py's HTTP phase (32 workers, the
two servers alternating; docs/activity-core-design.md): about 4% less API CPU per
claim+complete cycle and a fifth less load-generator CPU.

Nothing waits for company: a write is held at most until the loop has run what was ready
when it was made, and once FLUSH_AT_BYTES are held they are written at once (a large
answer meets the socket's flow control, uvicorn's pause_writing, as it would unwrapped;
holding it would save nothing and could hold a whole streamed answer). `close()` and
`write_eof()` send what is held first, `abort()` drops it (as the transport's own abort
drops its buffer), and what is written once the transport is closing is dropped, as
asyncio's transports drop writes to a lost connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["FLUSH_AT_BYTES", "OneWriteHttpToolsProtocol", "WritesOfAnIteration"]

Bytes = bytes | bytearray | memoryview

# uvicorn's (and asyncio's) default high-water mark of a transport's write buffer.
FLUSH_AT_BYTES = 64 * 1024


class WritesOfAnIteration(asyncio.Transport):
    """A transport whose writes made in one event-loop iteration leave as one write.

    Every other call goes to the wrapped transport as it is."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._held_bytes = 0

    def write(self, data: Bytes) -> None:
        if not data:
            return
        # a copy: a caller may reuse a bytearray or memoryview once write() returns
        self._held.append(bytes(data))
        self._held_bytes += len(data)
        if self._held_bytes >= FLUSH_AT_BYTES:
            self.flush()
        elif len(self._held) == 1:
            self._loop.call_soon(self.flush)

    def writelines(self, list_of_data: Iterable[Bytes]) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Write what is held, in one write (called after the iteration that wrote it)."""
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held.clear()
        self._held_bytes = 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held.clear()
        self._held_bytes = 0
        self._transport.abort()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._held_bytes

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through WritesOfAnIteration."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(WritesOfAnIteration(transport, self.loop))
