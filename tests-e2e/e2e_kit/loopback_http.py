"""The part every small HTTP peer of the suite shares: a `ThreadingHTTPServer` on a free
loopback port, served on a thread of its own from construction until `close()`, with a
request handler that speaks HTTP/1.1 and writes no access log (the stand-ins and the
proxy record what they need themselves)."""

from __future__ import annotations

from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ops_runtime.threaded_servers import served_in_a_thread

__all__ = ["LoopbackHttpServer", "QuietHandler"]


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return


class LoopbackHttpServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._serving = ExitStack()
        host, port = self._serving.enter_context(served_in_a_thread(server, name))
        self.url = f"http://{host}:{port}"

    def close(self) -> None:
        self._serving.close()
