"""The HTTP side of the tests' git server (git_server.py): each request authenticated,
switched (refusals, 5xx, a dropped or stalled answer) and passed to `git http-backend` as
CGI, its body streamed in from a thread while the answer streams out chunked."""

from __future__ import annotations

import contextlib
import io
import re
import socket
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from ops_testsupport.git_server import GitServer

__all__ = ["NAME_SEGMENT", "GitHTTPServer", "GitRequest", "Handler"]

# One segment of `<owner>/<name>`: no `.`/`..`, nothing a path could escape with.

NAME_SEGMENT = r"(?!\.+(?:/|$))[A-Za-z0-9._-]+"
_REQUEST_PATH = re.compile(rf"^/({NAME_SEGMENT})/({NAME_SEGMENT})\.git(/[A-Za-z0-9._/-]*)$")
_CHUNK = 64 * 1024
_DROPPED_AFTER = 16
_PASSED_HEADERS = ("Git-Protocol", "Content-Encoding", "User-Agent", "Accept", "Accept-Encoding")


@dataclass(frozen=True)
class GitRequest:
    """One request the server answered."""

    method: str
    path: str  # as the client sent it, without the query
    query: str
    user: str | None  # None: no or wrong credentials
    status: int
    content_encoding: str = ""  # the request body's, e.g. "gzip" (git's large negotiations)


class GitHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stalled or dropped answer never blocks the teardown

    def __init__(self, address: tuple[str, int], handler: type[Handler], git: GitServer) -> None:
        self.git = git
        super().__init__(address, handler)


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1: chunked answers (a truncated one is an error for curl) and `Expect:
    # 100-continue`, which BaseHTTPRequestHandler answers only from HTTP/1.1 on.
    protocol_version = "HTTP/1.1"
    timeout = 60  # a client that stops sending does not hold a thread forever
    server: GitHTTPServer
    _user: str | None = None

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: `requests` is the log."""

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def send_response(self, code: int, message: str | None = None) -> None:
        """Every answer's status line: the request is logged here, before the client can
        read a byte of it, so a test that saw the answer also sees the request."""
        # getattr: BaseHTTPRequestHandler answers a request line it cannot parse (400)
        # before it has a path or headers
        path, _, query = getattr(self, "path", "").partition("?")
        headers = getattr(self, "headers", None)
        encoding = headers.get("Content-Encoding", "") if headers is not None else ""
        self.server.git._record(GitRequest(self.command, path, query, self._user, code, encoding))
        super().send_response(code, message)

    def _serve(self) -> None:
        git = self.server.git
        path, _, query = self.path.partition("?")
        self._user = user = git._authenticated_user(self.headers.get("Authorization"))
        if not (self.headers.get("Content-Length") or "0").isdigit():
            self.headers.replace_header("Content-Length", "0")  # nothing read as a body
            self._plain(400, "bad Content-Length\n")
        else:
            self._answer(git, path, query, user)

    def _answer(self, git: GitServer, path: str, query: str, user: str | None) -> None:
        if git.status is not None:
            self._plain(git.status, f"status switched to {git.status}\n")
            return
        # the path's shape first: nothing outside root/<owner>/<name>.git, whoever asks
        decoded = urllib.parse.unquote(path)
        matched = _REQUEST_PATH.match(decoded)
        if matched is None or ".." in decoded.split("/"):
            self._plain(404, "not found\n")
            return
        if git.refuse_credentials or user is None:
            challenge = {"WWW-Authenticate": 'Basic realm="git"'}
            self._plain(401, "authentication required\n", challenge)
            return
        owner, name, rest = matched.groups()
        bare = git.root / owner / f"{name}.git"
        if not bare.is_dir() or bare.resolve().parent.parent != git.root.resolve():
            self._plain(404, "repository not found\n")
            return
        upload_pack = self.command == "POST" and rest == "/git-upload-pack"
        if upload_pack and git.stall_fetch is not None and git._stopping.wait(git.stall_fetch):
            self.close_connection = True  # stopped while stalled: no answer at all
            return
        self._cgi(
            git, f"/{owner}/{name}.git{rest}", query, user, drop=upload_pack and git.drop_fetch
        )

    def _plain(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        """A short answer that closes the connection. The request body is read first: a
        socket closed on unread data resets, and the client may lose the answer."""
        with contextlib.suppress(OSError, ValueError):
            for _ in self._body(*self._body_shape()):
                pass
        data = body.encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _body_shape(self) -> tuple[int, bool]:
        """The request body's length (checked digits by `_serve`) and whether it is chunked."""
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        return int(self.headers.get("Content-Length") or 0), chunked

    def _cgi(self, git: GitServer, path_info: str, query: str, user: str, *, drop: bool) -> None:
        length, chunked = self._body_shape()
        env = {
            **git._env,
            "GIT_PROJECT_ROOT": str(git.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_HTTP_MAX_REQUEST_BUFFER": "1000M",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path_info,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "REMOTE_USER": user,
            "REMOTE_ADDR": self.client_address[0],
        }
        # no CONTENT_LENGTH for a chunked body: http-backend then reads to the end of input
        if not chunked:
            env["CONTENT_LENGTH"] = str(length)
        for header in _PASSED_HEADERS:
            value = self.headers.get(header)
            if value is not None:
                env["HTTP_" + header.upper().replace("-", "_")] = value
        with (
            git.backend_log.open("ab") as log,
            subprocess.Popen(
                [git._git, "http-backend"],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            ) as backend,
        ):
            stdin = cast(IO[bytes], backend.stdin)
            stdout = cast(io.BufferedReader, backend.stdout)
            feeder = threading.Thread(target=self._feed, args=(stdin, length, chunked), daemon=True)
            feeder.start()
            try:
                self._relay(stdout, drop=drop)
            except (ConnectionError, TimeoutError):
                # the client went away (its low-speed limit, a timeout): not the server's
                # error, and nobody reads what the backend still has to say
                self.close_connection = True
                drop = True
            finally:
                if drop:
                    backend.kill()
                feeder.join(timeout=30)
                backend.wait(timeout=30)

    def _feed(self, stdin: IO[bytes], length: int, chunked: bool) -> None:
        """Copies the request body into the backend, then closes its input."""
        with contextlib.suppress(OSError, ValueError), stdin:  # the backend may exit early
            for data in self._body(length, chunked):
                stdin.write(data)

    def _body(self, length: int, chunked: bool) -> Iterator[bytes]:
        if not chunked:
            while length > 0:
                data = self.rfile.read(min(length, _CHUNK))
                if not data:
                    return
                length -= len(data)
                yield data
            return
        while True:
            size_line = self.rfile.readline(1024)
            if not size_line:
                return
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers, up to the blank line
                    pass
                return
            while size > 0:
                data = self.rfile.read(min(size, _CHUNK))
                if not data:
                    return
                size -= len(data)
                yield data
            self.rfile.readline(16)  # the CRLF after the chunk

    def _relay(self, stdout: io.BufferedReader, *, drop: bool) -> None:
        """The backend's CGI answer as HTTP: `Status:` and the headers, then the body, chunked
        unless the backend gave a Content-Length. With `drop`, the socket closes partway
        through the body."""
        status, reason, headers = 200, "OK", []
        while True:
            line = stdout.readline().rstrip(b"\r\n").decode("latin-1")
            if not line:
                break
            key, _, value = line.partition(":")
            value = value.strip()
            if key.lower() == "status":
                code, _, text = value.partition(" ")
                status, reason = int(code), text or reason
            else:
                headers.append((key, value))
        sized = any(key.lower() == "content-length" for key, _ in headers)
        self.send_response(status, reason)
        for key, value in headers:
            self.send_header(key, value)
        if not sized:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if drop:
            self._drop(stdout, sized)
            return
        while data := stdout.read1(_CHUNK):
            self.wfile.write(data if sized else b"%x\r\n%s\r\n" % (len(data), data))
        if not sized:
            self.wfile.write(b"0\r\n\r\n")

    def _drop(self, stdout: io.BufferedReader, sized: bool) -> None:
        data = stdout.read(_DROPPED_AFTER)
        self.wfile.write(data if sized else b"%x\r\n%s\r\n" % (len(data), data))
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
