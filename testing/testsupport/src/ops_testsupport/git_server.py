"""A real git smart-HTTP server for the tests: the machine's `git http-backend` (CGI) behind
a loopback `ThreadingHTTPServer`, with HTTP Basic authentication and switches that make it
misbehave the ways a git host does (refusals, 5xx, a dropped or a stalled fetch).

The CGI call is ours rather than `http.server.CGIHTTPRequestHandler`'s: that one is
deprecated, buffers the whole answer and cannot stream a request body in chunks. Here the
request body (Content-Length, chunked, or gzip-encoded, which `http-backend` decodes itself)
streams into the backend from a thread while its answer streams out as chunked HTTP/1.1, so
a truncated answer is a transfer error for the client, never a short but complete one.

Repositories live at `root/<owner>/<name>.git`; the helpers (`create_repository`,
`push_commit`, `force_push`, `push_large`) write to them directly with plumbing, without
going through HTTP, so they work whatever the switches say.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import io
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, cast

import pytest

__all__ = ["GitRequest", "GitServer", "git_server", "running_git_server"]

# The identity of every commit the helpers make: fixed, so no global git config is needed.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "git-server",
    "GIT_AUTHOR_EMAIL": "git-server@example.invalid",
    "GIT_COMMITTER_NAME": "git-server",
    "GIT_COMMITTER_EMAIL": "git-server@example.invalid",
}
# `<owner>/<name>`: one segment each, no dot-only names (so never `.` or `..`).
_SEGMENT = r"(?!\.+(?:/|$))[A-Za-z0-9._-]+"
_TARGET_REPO = re.compile(rf"^{_SEGMENT}/{_SEGMENT}$")
# A request's path: `/<owner>/<name>.git/<what http-backend serves>`.
_REQUEST_PATH = re.compile(rf"^/({_SEGMENT})/({_SEGMENT})\.git(/[A-Za-z0-9._/-]*)$")
_CHUNK = 64 * 1024
# The part of an upload-pack answer `drop_fetch` lets through before it closes the socket.
_DROPPED_AFTER = 16
# The request headers the backend sees as HTTP_* variables (as a CGI server would pass
# them); Git-Protocol carries `version=2`, Content-Encoding a gzip body.
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


def _git_environment() -> dict[str, str]:
    """The environment of the server's own git calls: nothing from the user's or the
    system's git config, no GIT_* variable inherited from whoever runs the tests."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    return env


class GitServer:
    """The server and its repositories; `start()` before use, `stop()` after (or use
    `running_git_server`). The switches are read per request, so a test flips them at any
    time."""

    def __init__(self, root: Path, *, username: str = "rein", token: str | None = None) -> None:
        self.root = root
        self.username = username
        self.token = token if token is not None else secrets.token_urlsafe(24)
        self.requests: list[GitRequest] = []
        self.base_url = ""
        self.url_template = ""
        # switches
        self.refuse_credentials = False
        self.status: int | None = None
        self.drop_fetch = False
        self.stall_fetch: float | None = None
        self.backend_log = root.parent / f"{root.name}.http-backend.log"
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._http: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._git = shutil.which("git") or ""
        self._env = _git_environment()
        self._commits = 0

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if not self._git:
            raise RuntimeError("git server: no `git` on PATH")
        self.root.mkdir(parents=True, exist_ok=True)
        self._http = _HTTPServer(("127.0.0.1", 0), _Handler, self)
        port = self._http.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.url_template = f"{self.base_url}/{{target_repo}}.git"
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},  # a quick teardown
            name=f"git-server:{port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()  # wakes stalled answers
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- what tests read -----------------------------------------------------------------

    def url(self, target_repo: str) -> str:
        return self.url_template.format(target_repo=_checked(target_repo))

    def head(self, target_repo: str) -> str:
        """The default branch's sha on the server."""
        bare = self._bare(target_repo)
        return self._run(bare, "rev-parse", "--verify", f"{self._default_ref(bare)}^{{commit}}")

    def refs(self, target_repo: str) -> dict[str, str]:
        """Every ref on the server -> its sha (HEAD, a symbolic ref, is not one)."""
        out = self._run(
            self._bare(target_repo), "for-each-ref", "--format=%(refname) %(objectname)"
        )
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    def write_token_file(self, directory: Path) -> Path:
        """A file holding the token alone (no newline), mode 0600; its path."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "git-token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.token)
        path.chmod(0o600)  # also when the file was already there
        return path

    def requests_to(self, target_repo: str) -> list[GitRequest]:
        """The requests served for one repository, in order."""
        prefix = f"/{_checked(target_repo)}.git/"
        with self._lock:
            return [request for request in self.requests if request.path.startswith(prefix)]

    # -- what tests change on the server -------------------------------------------------

    def create_repository(
        self, target_repo: str, files: dict[str, str] | None = None, *, default_branch: str = "main"
    ) -> str:
        """A bare repository with one commit on `default_branch`; the commit's sha."""
        bare = self.root / f"{_checked(target_repo)}.git"
        if bare.exists():
            raise FileExistsError(f"git server: {target_repo} exists")
        bare.parent.mkdir(parents=True, exist_ok=True)
        self._run(
            self.root, "init", "--quiet", "--bare", f"--initial-branch={default_branch}", str(bare)
        )
        # pushes are anonymous to http-backend unless it is told; ours are authenticated anyway
        self._run(bare, "config", "http.receivepack", "true")
        content = files if files is not None else {"README.md": f"# {target_repo}\n"}
        return self._commit(bare, content, parent=None, message="initial commit")

    def push_commit(
        self, target_repo: str, files: dict[str, str], message: str = "upstream change"
    ) -> str:
        """A new commit on the default branch, on top of its head; its sha."""
        bare = self._bare(target_repo)
        return self._commit(bare, files, parent=self.head(target_repo), message=message)

    def force_push(self, target_repo: str, files: dict[str, str]) -> str:
        """Replaces the default branch with a root commit holding `files`, which does not
        descend from the old head; its sha."""
        bare = self._bare(target_repo)
        old = self.head(target_repo)
        new = self._commit(bare, files, parent=None, message="rewritten history", old=old)
        if new == old:  # not possible with the commit counter in the message; a guard
            raise RuntimeError("git server: force_push made the same commit")
        return new

    def push_large(self, target_repo: str, megabytes: int) -> str:
        """A commit on the default branch adding an incompressible blob of `megabytes` MiB."""
        if megabytes < 1:
            raise ValueError("git server: push_large needs at least one megabyte")
        bare = self._bare(target_repo)
        blob = self._run(
            bare, "hash-object", "-w", "--stdin", input=os.urandom(megabytes * 1024 * 1024)
        )
        parent = self.head(target_repo)
        return self._commit(
            bare,
            {},
            parent=parent,
            message=f"add {megabytes} MiB",
            blobs={f"large-{megabytes}mb.bin": blob},
        )

    # -- internals -----------------------------------------------------------------------

    def _bare(self, target_repo: str) -> Path:
        bare = self.root / f"{_checked(target_repo)}.git"
        if not bare.is_dir():
            raise FileNotFoundError(f"git server: no repository {target_repo}")
        return bare

    def _default_ref(self, bare: Path) -> str:
        return self._run(bare, "symbolic-ref", "HEAD")

    def _commit(
        self,
        bare: Path,
        files: dict[str, str],
        *,
        parent: str | None,
        message: str,
        old: str | None = None,
        blobs: dict[str, str] | None = None,
    ) -> str:
        """A commit of `parent`'s tree (or an empty one) with `files` written over it, moved
        onto the default branch with a compare-and-swap from `old` (default: `parent`)."""
        with self._lock:
            self._commits += 1
            number = self._commits
        index = bare / f"index.helper-{number}"
        env = {**self._env, **_IDENTITY, "GIT_INDEX_FILE": str(index)}
        try:
            if parent is None:
                self._run(bare, "read-tree", "--empty", env=env)
            else:
                self._run(bare, "read-tree", parent, env=env)
            written = dict(blobs or {})
            for path, text in files.items():
                written[path] = self._run(bare, "hash-object", "-w", "--stdin", input=text.encode())
            for path, blob in written.items():
                self._run(
                    bare, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env
                )
            tree = self._run(bare, "write-tree", env=env)
        finally:
            index.unlink(missing_ok=True)
        parents = ["-p", parent] if parent is not None else []
        commit = self._run(
            bare, "commit-tree", tree, *parents, "-m", f"{message} (#{number})", env=env
        )
        expected = old if old is not None else parent
        ref = self._default_ref(bare)
        self._run(bare, "update-ref", ref, commit, *([expected] if expected else []))
        return commit

    def _run(
        self, cwd: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None
    ) -> str:
        done = subprocess.run(
            [self._git, *args],
            cwd=cwd,
            env=env if env is not None else self._env,
            input=input,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"git server: git {' '.join(args)} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        return done.stdout.decode().strip()

    def _record(self, request: GitRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _authenticated_user(self, authorization: str | None) -> str | None:
        """The user named by a Basic `authorization` header when its password is the token."""
        if not authorization or not authorization.startswith("Basic "):
            return None
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, _, password = decoded.partition(":")
        right_user = hmac.compare_digest(user.encode(), self.username.encode())
        right_token = hmac.compare_digest(password.encode(), self.token.encode())
        return user if right_user and right_token else None


def _checked(target_repo: str) -> str:
    if not _TARGET_REPO.match(target_repo):
        raise ValueError(f"git server: target repository {target_repo!r} is not <owner>/<name>")
    return target_repo


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stalled or dropped answer never blocks the teardown

    def __init__(self, address: tuple[str, int], handler: type[_Handler], git: GitServer) -> None:
        self.git = git
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1: chunked answers (a truncated one is an error for curl) and `Expect:
    # 100-continue`, which BaseHTTPRequestHandler answers only from HTTP/1.1 on.
    protocol_version = "HTTP/1.1"
    timeout = 60  # a client that stops sending does not hold a thread forever
    server: _HTTPServer
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


@contextlib.contextmanager
def running_git_server(root: Path, **kwargs: Any) -> Iterator[GitServer]:
    """A started GitServer with its repositories under `root`, stopped on exit."""
    server = GitServer(root, **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitServer]:
    """A started git smart-HTTP server (Basic auth: `username` / `token`) on 127.0.0.1,
    its repositories under tmp_path; stopped at teardown."""
    with running_git_server(tmp_path / "git-server") as server:
        yield server
