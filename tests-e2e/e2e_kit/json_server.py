"""A small real HTTP server on a free localhost port that answers every `POST` with JSON:
what the stand-ins for State Hub and the worker's event sink have in common. A subclass
says what a POST answers (`answer`), under the server's lock."""

from __future__ import annotations

import json
import threading
from typing import Any

from e2e_kit.loopback_http import LoopbackHttpServer, QuietHandler

__all__ = ["JsonPostServer"]


class JsonPostServer(LoopbackHttpServer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    status, answer = server.answer(self.path, headers, raw)
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler, type(self).__name__)

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        """The status and JSON body of a POST (called with the server's lock held)."""
        raise NotImplementedError
