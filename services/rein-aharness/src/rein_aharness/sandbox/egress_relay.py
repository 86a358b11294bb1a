"""The sandbox side of the egress proxy: a TCP listener on the sandbox's own loopback that
relays each connection to the proxy's Unix socket, then runs the approach.

    python3 -I egress_relay.py PORT SOCKET -- ARGV...

Most tools speak HTTP(S) proxies over TCP (`HTTPS_PROXY=http://127.0.0.1:PORT`), not over
Unix sockets, and a sandbox with an allowlist has no network but its own loopback. So
this script, the sandbox's first process, listens on 127.0.0.1:PORT inside that loopback
(no other namespace can reach it), starts the approach with its own environment (the
worker set the proxy variables in it), relays bytes, and exits with the approach's exit
status (128+N for a signal) as soon as the approach ends. It decides nothing: every
check is the proxy's, outside the sandbox, so an approach that kills or replaces this
relay (it may: same user, same sandbox) gains nothing but the socket it already had.

It runs on the sandbox's own Python (the host's, under the read-only /usr), with `-I`
(no PYTHON* variables, no user site, no script directory on the path), and so imports
only the standard library: nothing of the worker is importable inside the sandbox.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading

__all__ = ["main"]

_CHUNK = 64 * 1024
_MAX_CONNECTIONS = 32
_slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(_CHUNK):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, proxy_path: str) -> None:
    try:
        with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            upstream.connect(proxy_path)
            back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
            back.start()
            _copy(client, upstream)
            back.join()
    except OSError:
        pass
    finally:
        _slots.release()


def _serve(listener: socket.socket, proxy_path: str) -> None:
    while True:
        client, _ = listener.accept()
        # Over the bound, a connection is closed at once: the relay's threads count
        # against the sandbox's process bound.
        if not _slots.acquire(blocking=False):
            client.close()
            continue
        threading.Thread(target=_relay, args=(client, proxy_path), daemon=True).start()


def main(args: list[str]) -> int:
    if len(args) < 4 or args[2] != "--":
        print("usage: egress_relay.py PORT SOCKET -- ARGV...", file=sys.stderr)
        return 2
    port, proxy_path, argv = int(args[0]), args[1], args[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, proxy_path), daemon=True).start()
    try:
        child = subprocess.Popen(argv, close_fds=True)
    except OSError as exc:
        print(f"egress relay: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stderr.flush()
    # Not sys.exit: the relay threads may sit in recv, and must not hold the exit.
    os._exit(status)
