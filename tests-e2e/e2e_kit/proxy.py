"""An HTTP proxy between a worker and activity-core that can lose or hold `complete`s.

While `drop_complete_answers` is set, a `POST /ops-runs/{id}/complete` is forwarded and
answered by activity-core (which applies it), and then the connection to the worker is
closed without a response: exactly a network failure after the server accepted the
close. After `hold_completes()`, a `complete` waits in the proxy (a slow network) until
`release()`, then goes on; `complete_answers` records what activity-core answered to
each. Everything else passes through.
"""

from __future__ import annotations

import threading

import httpx

from e2e_kit.loopback_http import LoopbackHttpServer, QuietHandler

__all__ = ["DroppingProxy"]

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "upgrade"}
)


class DroppingProxy(LoopbackHttpServer):
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.drop_complete_answers = True
        self.dropped: list[tuple[str, int]] = []  # (path, the status activity-core answered)
        self.forwarded = 0
        self.held: list[str] = []  # paths of the completes that waited in the proxy
        self.complete_answers: list[tuple[str, int, bytes]] = []  # (path, status, body)
        self._holding = False
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=60.0)
        proxy = self

        class Handler(QuietHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                is_complete = self.command == "POST" and self.path.split("?")[0].endswith(
                    "/complete"
                )
                with proxy._lock:
                    hold = is_complete and proxy._holding
                    if hold:
                        proxy.held.append(self.path)
                if hold:
                    proxy._released.wait(120)
                try:
                    answer = proxy._http.request(
                        self.command, proxy.upstream + self.path, headers=headers, content=body
                    )
                except httpx.HTTPError:
                    # activity-core is down: the worker sees a dropped connection too
                    self.close_connection = True
                    return
                with proxy._lock:
                    proxy.forwarded += 1
                    if is_complete:
                        proxy.complete_answers.append(
                            (self.path, answer.status_code, answer.content)
                        )
                    drop = proxy.drop_complete_answers and is_complete
                    if drop:
                        proxy.dropped.append((self.path, answer.status_code))
                if drop:
                    self.close_connection = True
                    return
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = _forward
            do_POST = _forward
            do_PUT = _forward  # a worker's changes upload, before its complete

        super().__init__(Handler, "dropping-proxy")

    def pass_through(self) -> None:
        with self._lock:
            self.drop_complete_answers = False

    def hold_completes(self) -> None:
        with self._lock:
            self._holding = True
            self._released.clear()

    def release(self) -> None:
        """Let every held `complete` go on, and hold no more."""
        with self._lock:
            self._holding = False
        self._released.set()

    def close(self) -> None:
        self.release()
        super().close()
        self._http.close()
