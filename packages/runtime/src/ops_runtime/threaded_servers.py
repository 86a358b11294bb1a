"""A standard-library socket server run on a thread of its own for the length of a block:
the workers' probe endpoints (ops_runtime.liveness, rein-aharness's metrics)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["served_in_a_thread"]


@contextmanager
def served_in_a_thread(server: socketserver.TCPServer, name: str) -> Iterator[tuple[str, int]]:
    """Run `server.serve_forever` on a daemon thread named `name` until the block ends;
    yields the address the server is bound to (host, port). At the end the server is shut
    down and closed, and its thread joined."""
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    bound = server.server_address
    try:
        yield (str(bound[0]), int(bound[1]))
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
