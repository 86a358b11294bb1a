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
going through HTTP, so they work whatever the switches say. The HTTP side (authentication,
the switches, the CGI call) is git_http.py.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import os
import re
import secrets
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops_testsupport.git_http import NAME_SEGMENT, GitHTTPServer, GitRequest, Handler

__all__ = ["GitRequest", "GitServer", "git_server", "running_git_server"]

# The identity of every commit the helpers make: fixed, so no global git config is needed.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "git-server",
    "GIT_AUTHOR_EMAIL": "git-server@example.invalid",
    "GIT_COMMITTER_NAME": "git-server",
    "GIT_COMMITTER_EMAIL": "git-server@example.invalid",
}
# `<owner>/<name>`: one segment each, no dot-only names (so never `.` or `..`).
_TARGET_REPO = re.compile(rf"^{NAME_SEGMENT}/{NAME_SEGMENT}$")
# A request's path: `/<owner>/<name>.git/<what http-backend serves>`.
# The part of an upload-pack answer `drop_fetch` lets through before it closes the socket.
# The request headers the backend sees as HTTP_* variables (as a CGI server would pass
# them); Git-Protocol carries `version=2`, Content-Encoding a gzip body.


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
        self._http: GitHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._git = shutil.which("git") or ""
        self._env = _git_environment()
        self._commits = 0

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if not self._git:
            raise RuntimeError("git server: no `git` on PATH")
        self.root.mkdir(parents=True, exist_ok=True)
        self._http = GitHTTPServer(("127.0.0.1", 0), Handler, self)
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
