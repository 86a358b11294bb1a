"""uvicorn on its own event loop in a thread, on a free localhost port: for tests that need
an app behind a real socket in this process (a browser's, or the bytes on the wire)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

START_SECONDS = 20


@contextmanager
def uvicorn_in_a_thread(config: uvicorn.Config) -> Iterator[int]:
    """Serve `config` (its host and port are not used) until the block ends; yields the
    port. Stops the server and waits for its thread when the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_SECONDS
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
