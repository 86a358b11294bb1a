"""How long a server keeps a connection that stops sending: for the tests of the threaded
probe servers (liveness, worker metrics), whose read timeout bounds it."""

from __future__ import annotations

import socket
import time

__all__ = ["seconds_until_closed"]


def seconds_until_closed(host: str, port: int, sent: bytes, limit: float) -> float:
    """Connect, send `sent` (nothing, or half a request), then wait: the seconds until the
    server closed the connection. AssertionError when it is still open after `limit`."""
    with socket.create_connection((host, port), timeout=limit) as sock:
        started = time.monotonic()
        sock.sendall(sent)
        try:
            while sock.recv(65536):
                pass  # an answer to the half request (408 or 400) before the close
        except TimeoutError:
            raise AssertionError(f"still open after {limit} s") from None
        except ConnectionResetError:
            pass
        return time.monotonic() - started
