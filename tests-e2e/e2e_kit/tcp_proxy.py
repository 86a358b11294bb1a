"""A TCP proxy that can be cut: between a service and PostgreSQL, a database outage that the
test switches on and off, with nothing restarted.

`cut()` closes every connection it carries and, until `restore()`, takes each new one and
closes it at once: to a client, exactly a database that went away (its connections die, a
new connection is refused). The listening port stays bound throughout, so the outage ends
the moment `restore()` is called.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.parse

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.refused = 0  # connections closed at once while cut
        self._cut = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @classmethod
    def for_dsn(cls, dsn: str) -> TcpProxy:
        parts = urllib.parse.urlsplit(dsn)
        return cls(parts.hostname or "127.0.0.1", parts.port or 5432)

    @property
    def port(self) -> int:
        port: int = self._listener.getsockname()[1]
        return port

    def dsn(self, dsn: str) -> str:
        """`dsn` with its host and port replaced by this proxy's."""
        parts = urllib.parse.urlsplit(dsn)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            carried, self._open = self._open, set()
        for sock in carried:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                cut = self._cut
                if cut:
                    self.refused += 1
            if cut:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(target)
            _close(source)
            _close(target)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
