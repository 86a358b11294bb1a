"""A request arrives within bounds, or its connection is closed: its head (request line and
header lines) at most MAX_HEAD_BYTES, all of it (head and body) within
REQUEST_READ_SECONDS.

uvicorn's httptools protocol bounds neither. Measured before this module: 150 MiB of
header lines sent on one connection grew the process by 170 MiB (every header is kept
until the head ends, and nothing ends it), and a connection that sends nothing, or a byte
now and then, is held for ever (uvicorn's keep-alive timeout runs only between a response
and the next request). A few hundred such connections from anything that reaches the port
(a worker's pod, whatever the ingress forwards) would take the API's memory or its file
descriptors, and with them every worker's claims and closes.

`BoundedRequests` is uvicorn's protocol with both bounds:

- Bytes received while a head is incomplete are counted; more than MAX_HEAD_BYTES without
  its end is answered 431 `headers_too_large`. A head that ends within a larger read is
  measured when it ends (its target, header names and values) and refused likewise,
  before any app sees it.
- A request must arrive whole within REQUEST_READ_SECONDS of the connection's start or of
  its first byte on a kept-alive connection. Not there yet: 408 `request_timeout` if its
  head had begun, a silent close if nothing had come (a fresh or idle connection), and,
  when the app already has the request and waits for the rest of the body, a close (the
  app sees the client leave). Time in which the server keeps the client waiting is not
  the client's: while reading is paused, the request is queued behind an earlier answer
  (pipelining) or its `100 Continue` is not yet sent, the deadline starts again.

A refusal ends the connection, with a lingering close (`_close_lingering`). It is written
only when no earlier answer on the connection is still owed (pipelining), so that it
cannot cut into one; then the connection just closes. The limits are class attributes so
that tests can shorten them.
"""

from __future__ import annotations

import asyncio
import json
import logging

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ops_contracts import REFUSAL_HTTP_STATUS, RefusalCode

__all__ = [
    "LINGER_BYTES",
    "LINGER_SECONDS",
    "MAX_HEAD_BYTES",
    "REQUEST_READ_SECONDS",
    "BoundedRequests",
]

# The longest head taken. Browsers send 1-3 KiB, a worker's request under 1 KiB; nginx
# takes 4 x 8 KiB by default and Node.js 16 KiB.
MAX_HEAD_BYTES = 64 * 1024
# How long a request may take to arrive. A worker's largest body is 1 MiB by default
# (ACTIVITY_CORE_MAX_BODY_BYTES): 30 s is 35 KB/s. A long-poll claim is not affected: its
# request has arrived; only the answer waits.
REQUEST_READ_SECONDS = 30.0
# How long a refused connection still reads (and drops) what its client sends, and how
# much of it at most.
LINGER_SECONDS = 2.0
LINGER_BYTES = 1024 * 1024

log = logging.getLogger(__name__)


class BoundedRequests(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded head and a deadline per request."""

    max_head_bytes = MAX_HEAD_BYTES
    request_read_seconds = REQUEST_READ_SECONDS
    linger_seconds = LINGER_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # True while the bytes that arrive belong to a request's head (or precede one)
        self._head_open = True
        self._head_bytes = 0
        # the parser has seen the first byte of a request that has not ended yet
        self._request_begun = False
        self._refused = False
        self._dropped = 0  # bytes read and dropped after a refusal
        # When the request now arriving began (loop time; the connection counts as its
        # start); None while none is arriving. One timer per connection watches it: a
        # timer per request would cost every claim and close a timer's setup and cancel.
        self._arriving_since: float | None = self.loop.time()
        self._watch: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._watch_in(self.request_read_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            # dropped; a lingering close ends early once it has dropped enough
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES and not self.transport.is_closing():
                self.transport.close()
            return
        if self._head_open:
            self._head_bytes += len(data)
            if self._arriving_since is None:
                self._arriving_since = self.loop.time()
        super().data_received(data)
        if self._head_open and not self._refused and self._head_bytes > self.max_head_bytes:
            self._refuse_head_too_large()

    # Parser callbacks: after a refusal, what the parser still finds in the read is not a
    # request (what only fills the dead request's url and headers is left alone).
    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._request_begun = True
        # a request that begins in the read that ended the one before
        if self._arriving_since is None:
            self._arriving_since = self.loop.time()

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._head_open = False
        size = len(self.url) + sum(len(name) + len(value) for name, value in self.headers)
        if size > self.max_head_bytes:
            self._refuse_head_too_large()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        super().on_message_complete()
        self._arriving_since = None
        self._head_open = True
        self._head_bytes = 0
        self._request_begun = False

    # The deadline
    def _watch_in(self, seconds: float) -> None:
        self._watch = self.loop.call_later(seconds, self._check_deadline)

    def _check_deadline(self) -> None:
        self._watch = None
        if self._refused or self.transport.is_closing():
            return
        now = self.loop.time()
        if self._arriving_since is None:
            self._watch_in(self.request_read_seconds)
            return
        if self._server_holds_the_request():
            # the clock starts when the server lets go: look again soon, so that the
            # client gets at least nine tenths of its time from then on
            self._arriving_since = now
            self._watch_in(min(1.0, self.request_read_seconds / 10))
            return
        left = self._arriving_since + self.request_read_seconds - now
        if left > 0:
            self._watch_in(left)
        elif self._head_open and self._request_begun:
            self._refuse(
                RefusalCode.request_timeout,
                f"the request did not arrive within {self.request_read_seconds:g} s",
            )
        else:
            # nothing of a request yet, or the app has the head and waits for the body
            self._refused = True
            self.transport.close()

    def _server_holds_the_request(self) -> bool:
        """The client is not late while the server keeps it waiting: reading paused (flow
        control), its request queued behind an answer still owed (pipelining), or its
        `100 Continue` not yet sent (uvicorn sends it when the app first reads the body)."""
        if self.flow.read_paused:
            return True
        if self._head_open or self.cycle is None:
            return False
        cycle = self.cycle
        return cycle.waiting_for_100_continue or any(queued is cycle for queued, _ in self.pipeline)

    # Refusals
    def _refuse_head_too_large(self) -> None:
        self._refuse(
            RefusalCode.headers_too_large,
            f"the request line and headers exceed {self.max_head_bytes} bytes",
        )

    def _refuse(self, code: RefusalCode, detail: str) -> None:
        self._refused = True
        host, port = self.client if self.client else ("unknown", 0)
        log.warning("refused a request from %s:%d: %s (%s)", host, port, detail, code.value)
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(self._refusal(code, detail))
            if self.transport.can_write_eof():
                self._close_lingering()
                return
        self.transport.close()

    def _close_lingering(self) -> None:
        """End our side after the refusal, drop what the client still sends for up to
        `linger_seconds` and LINGER_BYTES (or until it closes), then close. Closing at once with the
        client's bytes unread would make the kernel answer them with a reset, and a reset
        discards the refusal still on its way: the client would see a dropped connection
        instead of the 431 or 408. (nginx's lingering_close, for the same reason.)"""
        self.transport.write_eof()
        self.flow.resume_reading()
        if self._watch is not None:
            self._watch.cancel()
        self._watch = self.loop.call_later(self.linger_seconds, self.transport.close)

    def _refusal(self, code: RefusalCode, detail: str) -> bytes:
        body = json.dumps({"code": code.value, "detail": detail}, separators=(",", ":")).encode()
        head = [STATUS_LINE[REFUSAL_HTTP_STATUS[code]]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
            ]
        )
        return b"".join(head) + body
