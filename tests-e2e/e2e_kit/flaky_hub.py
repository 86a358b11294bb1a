"""A State Hub stand-in that can be down: `POST /progress` answers 503 while `down` is set,
and otherwise records the task, idempotent on its `Idempotency-Key` as State Hub is (a
repeat of an accepted key gets the same id back, and is counted as a repeat)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FlakyHub"]


class FlakyHub:
    def __init__(self) -> None:
        self.down = False
        self.refused = 0  # 503s answered while down
        self.accepted: dict[str, dict[str, Any]] = {}  # key -> the task it first accepted
        self.answered_ok: Counter[str] = Counter()  # key -> 2xx answers (repeats included)
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                key = self.headers.get("Idempotency-Key") or ""
                with hub._lock:
                    if hub.down or self.path != "/progress":
                        hub.refused += 1
                        status, answer = 503, {"error": "state hub is down"}
                    else:
                        first = key not in hub.accepted
                        if first:
                            hub.accepted[key] = json.loads(raw) if raw else {}
                        hub.answered_ok[key] += 1
                        number = list(hub.accepted).index(key) + 1
                        status, answer = (201 if first else 200), {"id": f"hub-{number}"}
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def set_down(self, down: bool) -> None:
        with self._lock:
            self.down = down

    def ok_answers(self, keys: list[str]) -> dict[str, int]:
        with self._lock:
            return {key: self.answered_ok[key] for key in keys}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
