"""The liveness endpoint of a worker process: `GET /livez`, 200 while its event loop runs.

Used by rein-aharness's worker (REIN_AHARNESS_LIVENESS_ADDRESS) and activity-core's
Temporal worker (ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS).

A liveness probe must fail when the worker is stuck, and only then. A long piece of work is
not stuck: the workers await their sandboxed process, git, PostgreSQL or Activity Core, and
the event loop keeps running the whole time. A worker whose event loop no longer runs is
stuck for good: a call that blocks the loop's thread (a hung file system, a synchronous
call that never returns) stops everything the process does, and no await resumes.

So a callback on the event loop records the time every second (at most a quarter of the
limit), and a small HTTP server on a thread of its own answers from that record: 200 while
the loop ran within the last `max_stall_seconds`, 503 after (and a warning in the log, so
the restart that follows has its reason next to it). The thread keeps answering while the
loop is blocked, which is the point; a process that is frozen altogether (stopped, or
starved of CPU) does not answer, and a kubelet counts the timeout as a failure too.

What this does not see: a loop that runs but whose tasks wait forever on each other, or
(in the Temporal worker) a stuck SDK core on its own threads. A run's lease expires then,
and Temporal times an activity out; another worker takes the work.

The same server may answer `GET /readyz` too (`readiness=`): a process that has one probe
address keeps both probes on it. What "ready" means is the caller's; the callable is read
on the server's thread, so it must answer from a record and never wait on the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import socketserver
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ops_runtime.threaded_servers import served_in_a_thread

__all__ = [
    "LIVENESS_PATH",
    "PROBE_READ_SECONDS",
    "READINESS_PATH",
    "LoopHeartbeat",
    "Readiness",
    "serve_liveness",
]

log = logging.getLogger(__name__)

LIVENESS_PATH = "/livez"
READINESS_PATH = "/readyz"
# (ready, body): 200 with the body when ready, 503 with it when not. Called on the probe
# server's thread for every request.
Readiness = Callable[[], tuple[bool, dict[str, Any]]]
_TICK_SECONDS = 1.0
# A probe connection silent for this long is closed. The server takes a thread per
# connection, and without a timeout one that never sends (or stops halfway) holds its
# thread for ever; a kubelet's probe times out after 1 s by default.
PROBE_READ_SECONDS = 10.0


class LoopHeartbeat:
    """When the event loop last ran our callback (time.monotonic). `start` and `stop` run
    on the loop's thread; `seconds_since_tick` may be read from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, interval: float) -> None:
        self._loop = loop
        self._interval = interval
        self._last = time.monotonic()
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._tick()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def seconds_since_tick(self) -> float:
        return max(0.0, time.monotonic() - self._last)

    def _tick(self) -> None:
        self._last = time.monotonic()
        self._handle = self._loop.call_later(self._interval, self._tick)


def _handler(
    heartbeat: LoopHeartbeat,
    max_stall: float,
    read_timeout: float,
    readiness: Readiness | None,
) -> type[BaseHTTPRequestHandler]:
    class LivenessHandler(BaseHTTPRequestHandler):
        timeout = read_timeout

        def do_GET(self) -> None:
            path = self.path.partition("?")[0]
            if path == READINESS_PATH and readiness is not None:
                ready, body = readiness()
                self._answer(200 if ready else 503, body)
                return
            if path != LIVENESS_PATH:
                self._answer(404, {"status": "not_found"})
                return
            stalled = round(heartbeat.seconds_since_tick(), 3)
            if stalled <= max_stall:
                self._answer(200, {"status": "ok", "seconds_since_loop_ran": stalled})
                return
            log.warning(
                "liveness: the event loop has not run for %.1f s (limit %s s); failing /livez",
                stalled,
                max_stall,
            )
            self._answer(503, {"status": "stalled", "seconds_since_loop_ran": stalled})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return None  # one line per probe would bury the worker's own log

    return LivenessHandler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host up in DNS (getfqdn) for a name nothing
        # here uses; a slow resolver must not delay the worker's start.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


class _Server6(_Server):
    address_family = socket.AF_INET6


@contextmanager
def serve_liveness(
    host: str,
    port: int,
    *,
    max_stall_seconds: float,
    read_timeout_seconds: float = PROBE_READ_SECONDS,
    readiness: Readiness | None = None,
) -> Iterator[tuple[str, int]]:
    """Serve `/livez` on host:port until the block ends (and `/readyz` from `readiness`
    when given; 404 otherwise); yields the bound address. A connection silent for
    `read_timeout_seconds` is closed.

    Enter it on the event loop's thread. OSError when the address cannot be bound."""
    heartbeat = LoopHeartbeat(
        asyncio.get_running_loop(), interval=min(_TICK_SECONDS, max_stall_seconds / 4)
    )
    server_class = _Server6 if ":" in host else _Server
    server = server_class(
        (host, port), _handler(heartbeat, max_stall_seconds, read_timeout_seconds, readiness)
    )
    heartbeat.start()
    try:
        with served_in_a_thread(server, "liveness") as address:
            shown = f"[{address[0]}]" if ":" in address[0] else address[0]
            log.info("liveness on http://%s:%d%s", shown, address[1], LIVENESS_PATH)
            yield address
    finally:
        heartbeat.stop()
