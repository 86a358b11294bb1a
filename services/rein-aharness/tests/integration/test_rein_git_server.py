"""The `git_server` fixture against a real git client: clone, fetch and push over smart
HTTP with Basic authentication, and each switch that makes it misbehave.

The client gets its credentials from a tiny credential helper reading the token file, so
the whole 401 → helper → retry path runs as it does against a real host.
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from ops_testsupport.git_server import GitServer, running_git_server

REPO = "acme/widgets"


def _client_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",  # no credentials: fail, never wait on a prompt
        GIT_ASKPASS="",
        SSH_ASKPASS="",
        GIT_AUTHOR_NAME="client",
        GIT_AUTHOR_EMAIL="client@example.invalid",
        GIT_COMMITTER_NAME="client",
        GIT_COMMITTER_EMAIL="client@example.invalid",
    )
    return env


def _helper(username: str, token_file: Path) -> str:
    """A credential helper that answers `get` with the user and the file's token."""
    answer = f'echo username={username} && echo "password=$(cat {token_file})"'
    return f'!f() {{ test "$1" = get && {answer}; }}; f'


def git(
    cwd: Path,
    *args: str,
    credentials: str | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """A git client call (not checked: tests look at the outcome); `env` adds variables."""
    config = ["-c", "credential.helper="]  # none inherited
    if credentials is not None:
        config += ["-c", f"credential.helper={credentials}"]
    return subprocess.run(
        ["git", *config, *args],
        cwd=cwd,
        env={**_client_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(
    cwd: Path, *args: str, credentials: str | None = None, env: dict[str, str] | None = None
) -> str:
    done = git(cwd, *args, credentials=credentials, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def credentials(git_server: GitServer, tmp_path: Path) -> str:
    return _helper(git_server.username, git_server.write_token_file(tmp_path / "secrets"))


@pytest.fixture
def clone(git_server: GitServer, credentials: str, tmp_path: Path) -> Path:
    """A clone of REPO (created with one commit) made with the right token."""
    git_server.create_repository(REPO, {"README.md": "hello\n", "src/app.py": "print(1)\n"})
    ok(tmp_path, "clone", git_server.url(REPO), "work", credentials=credentials)
    return tmp_path / "work"


def test_a_clone_with_the_token_has_the_server_head(
    git_server: GitServer, credentials: str, tmp_path: Path
) -> None:
    head = git_server.create_repository(REPO, {"README.md": "hello\n", "src/app.py": "x = 1\n"})
    assert git_server.url_template == f"{git_server.base_url}/{{target_repo}}.git"
    assert git_server.base_url.startswith("http://127.0.0.1:")

    ok(tmp_path, "clone", git_server.url(REPO), "work", credentials=credentials)

    work = tmp_path / "work"
    assert ok(work, "rev-parse", "HEAD") == head == git_server.head(REPO)
    assert (work / "src" / "app.py").read_text() == "x = 1\n"
    served = [r for r in git_server.requests if r.status == 200]
    assert served and all(r.user == git_server.username for r in served)
    # protocol v2 (the Git-Protocol header reached the backend): ls-refs, then fetch
    assert len([r for r in served if r.path.endswith("/git-upload-pack")]) == 2


def test_a_protocol_v0_client_clones_and_pushes_too(
    git_server: GitServer, credentials: str, tmp_path: Path
) -> None:
    # v2 is git's default; v0 is a different exchange (no ls-refs, the pack in one POST)
    head = git_server.create_repository(REPO)
    v0 = ["-c", "protocol.version=0"]

    ok(tmp_path, *v0, "clone", git_server.url(REPO), "work", credentials=credentials)
    work = tmp_path / "work"
    ok(work, "commit", "-q", "--allow-empty", "-m", "v0")
    ok(work, *v0, "push", "origin", "HEAD:refs/heads/v0", credentials=credentials)

    assert ok(work, "rev-parse", "HEAD^") == head
    assert git_server.refs(REPO)["refs/heads/v0"] == ok(work, "rev-parse", "HEAD")
    uploads = [r for r in git_server.requests if r.path.endswith("/git-upload-pack")]
    assert len(uploads) == 1  # v2 would have asked twice (ls-refs, then fetch)


def test_the_token_file_holds_the_token_alone_and_is_private(
    git_server: GitServer, tmp_path: Path
) -> None:
    path = git_server.write_token_file(tmp_path / "secrets")
    assert path.read_text() == git_server.token
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(git_server.token) >= 32


def test_no_credentials_fail_to_authenticate_and_are_logged_without_a_user(
    git_server: GitServer, tmp_path: Path
) -> None:
    git_server.create_repository(REPO)

    done = git(tmp_path, "clone", git_server.url(REPO), "work")

    assert done.returncode != 0
    assert "could not read Username" in done.stderr
    assert git_server.requests, "the client reached the server"
    assert all(r.user is None and r.status == 401 for r in git_server.requests)
    assert not (tmp_path / "work").exists()


def test_a_wrong_token_fails_to_authenticate(git_server: GitServer, tmp_path: Path) -> None:
    git_server.create_repository(REPO)
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token")

    done = git(tmp_path, "clone", git_server.url(REPO), "work", credentials=_helper("rein", wrong))

    assert done.returncode != 0
    assert "Authentication failed" in done.stderr
    assert all(r.user is None and r.status == 401 for r in git_server.requests)


def test_a_401_challenges_for_basic_credentials(git_server: GitServer) -> None:
    git_server.create_repository(REPO)
    status, headers, _ = _raw_get(git_server, f"/{REPO}.git/info/refs?service=git-upload-pack")
    assert status == 401
    assert headers.get("WWW-Authenticate") == 'Basic realm="git"'


def test_refused_credentials_fail_even_with_the_right_token(
    git_server: GitServer, credentials: str, tmp_path: Path
) -> None:
    git_server.create_repository(REPO)
    git_server.refuse_credentials = True

    done = git(tmp_path, "clone", git_server.url(REPO), "work", credentials=credentials)

    assert done.returncode != 0
    assert "Authentication failed" in done.stderr
    assert git_server.requests[-1].user == git_server.username  # right token, still refused
    assert git_server.requests[-1].status == 401


def test_a_status_switch_answers_every_request_with_it(
    git_server: GitServer, credentials: str, tmp_path: Path
) -> None:
    git_server.create_repository(REPO)
    git_server.status = 503

    done = git(tmp_path, "clone", git_server.url(REPO), "work", credentials=credentials)

    assert done.returncode != 0
    assert "503" in done.stderr
    assert [r.status for r in git_server.requests] == [503]


def test_an_unknown_repository_is_404(
    git_server: GitServer, credentials: str, tmp_path: Path
) -> None:
    git_server.create_repository(REPO)

    done = git(tmp_path, "clone", git_server.url("acme/nothing"), "work", credentials=credentials)

    assert done.returncode != 0
    assert "not found" in done.stderr
    assert git_server.requests[-1].status == 404
    assert git_server.requests[-1].user == git_server.username


@pytest.mark.parametrize(
    "path",
    [
        "/../x.git/info/refs?service=git-upload-pack",
        "/acme/../../x.git/info/refs?service=git-upload-pack",
        "/%2e%2e/x.git/info/refs?service=git-upload-pack",
        "/acme/widgets.git/../../../etc/passwd",
        "//etc/x.git/info/refs",
        "/acme/widgets/info/refs",  # no .git: not a repository path
        "/acme/widgets.git",
    ],
)
def test_a_path_outside_the_repositories_is_404(git_server: GitServer, path: str) -> None:
    git_server.create_repository(REPO)
    (git_server.root.parent / "x.git").mkdir()  # something there to escape to

    status, _, _ = _raw_get(git_server, path, authenticated=True)

    assert status == 404
    assert git_server.requests[-1].status == 404


def test_a_dropped_fetch_fails_without_hanging(git_server: GitServer, clone: Path) -> None:
    git_server.push_commit(REPO, {"README.md": "changed\n"})
    git_server.drop_fetch = True
    started = time.monotonic()

    done = git(clone, "fetch", "origin", credentials=_credentials_of(clone), timeout=30)

    assert done.returncode != 0
    assert time.monotonic() - started < 10
    dropped = [r for r in git_server.requests if r.method == "POST"]
    assert dropped and dropped[-1].path.endswith("/git-upload-pack")


def test_a_stalled_fetch_times_out_at_the_clients_low_speed_limit(
    git_server: GitServer, clone: Path
) -> None:
    git_server.push_commit(REPO, {"README.md": "changed\n"})
    # curl gives up some 3 s in (it checks the speed once a second); the stall is long
    # enough that a slow machine still sees the client give up, not a late answer
    git_server.stall_fetch = 10
    started = time.monotonic()

    done = git(
        clone,
        "-c",
        "http.lowSpeedLimit=1",
        "-c",
        "http.lowSpeedTime=1",
        "fetch",
        "origin",
        credentials=_credentials_of(clone),
        timeout=30,
    )

    elapsed = time.monotonic() - started
    assert done.returncode != 0
    assert elapsed < 10, "the client gave up before the server answered"
    assert "Operation too slow" in done.stderr or "timed out" in done.stderr.lower()


def test_a_pushed_commit_arrives_with_a_fetch(git_server: GitServer, clone: Path) -> None:
    old = git_server.head(REPO)

    new = git_server.push_commit(REPO, {"docs/notes.md": "notes\n"}, message="add notes")

    assert new != old and git_server.head(REPO) == new
    ok(clone, "fetch", "origin", credentials=_credentials_of(clone))
    assert ok(clone, "rev-parse", "origin/main") == new
    assert ok(clone, "rev-parse", f"{new}^") == old
    assert ok(clone, "show", f"{new}:docs/notes.md") == "notes"
    assert ok(clone, "show", f"{new}:README.md") == "hello"  # the rest of the tree kept


def test_a_force_push_replaces_the_history(git_server: GitServer, clone: Path) -> None:
    old = git_server.head(REPO)

    new = git_server.force_push(REPO, {"README.md": "rewritten\n"})

    assert git_server.head(REPO) == new != old
    ok(clone, "fetch", "origin", credentials=_credentials_of(clone))
    assert ok(clone, "rev-parse", "origin/main") == new
    not_descending = git(clone, "merge-base", "--is-ancestor", old, new)
    assert not_descending.returncode == 1


def test_git_push_lands_on_the_server(git_server: GitServer, clone: Path) -> None:
    (clone / "feature.txt").write_text("feature\n")
    ok(clone, "add", "feature.txt")
    ok(clone, "commit", "-q", "-m", "feature")
    local = ok(clone, "rev-parse", "HEAD")

    ok(clone, "push", "origin", "HEAD:refs/heads/rein/feature", credentials=_credentials_of(clone))

    refs = git_server.refs(REPO)
    assert refs["refs/heads/rein/feature"] == local
    assert refs["refs/heads/main"] == git_server.head(REPO) != local
    pushes = [r for r in git_server.requests if r.path.endswith("/git-receive-pack")]
    assert pushes and pushes[-1].status == 200 and pushes[-1].user == git_server.username
    # enabled per repository, so a push does not depend on http-backend's REMOTE_USER rule
    bare = git_server.root / f"{REPO}.git"
    assert ok(bare, "config", "--bool", "http.receivepack") == "true"


def test_a_large_push_streams_a_chunked_body_in(git_server: GitServer, clone: Path) -> None:
    # over http.postBuffer (1 MiB), git sends the pack chunked, of unknown length
    (clone / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    ok(clone, "add", "big.bin")
    ok(clone, "commit", "-q", "-m", "big")
    local = ok(clone, "rev-parse", "HEAD")

    ok(clone, "push", "origin", "HEAD:main", credentials=_credentials_of(clone))

    assert git_server.head(REPO) == local


def test_a_large_upstream_commit_arrives_whole(git_server: GitServer, clone: Path) -> None:
    new = git_server.push_large(REPO, 2)

    ok(clone, "fetch", "origin", credentials=_credentials_of(clone))

    assert ok(clone, "rev-parse", "origin/main") == new
    size = ok(clone, "cat-file", "-s", f"{new}:large-2mb.bin")
    assert int(size) == 2 * 1024 * 1024


def test_a_gzip_negotiation_is_understood(git_server: GitServer, clone: Path) -> None:
    # Many local commits the server does not have: after a first round of 16 `have`s
    # with none in common, the next round's pass 1 KiB, and git gzips a body that large.
    # Their dates are later than the server's commits, so the walk (newest first) offers
    # them before the common one: made in the same second, the common commit could come
    # in the first round, end the negotiation there and leave every body small.
    later = int(time.time()) + 3600
    for number in range(60):
        (clone / "local.txt").write_text(f"{number}\n")
        date = {"GIT_COMMITTER_DATE": f"{later + number} +0000"}
        ok(clone, "add", "local.txt")
        ok(clone, "commit", "-q", "-m", f"local {number}", env=date)
    new = git_server.push_commit(REPO, {"upstream.txt": "upstream\n"})

    ok(clone, "fetch", "origin", credentials=_credentials_of(clone))

    assert ok(clone, "rev-parse", "origin/main") == new
    gzipped = [r for r in git_server.requests if r.content_encoding == "gzip"]
    assert gzipped and all(r.status == 200 for r in gzipped)


def _two_clones(
    git_server: GitServer, credentials: str, tmp_path: Path
) -> list[subprocess.Popen[str]]:
    """Two `git clone -q` of REPO into tmp_path/work-0 and work-1, started together with
    only `credentials` as their helper; their output piped."""
    command = ["git", "-c", "credential.helper=", "-c", f"credential.helper={credentials}"]
    return [
        subprocess.Popen(
            [*command, "clone", "-q", git_server.url(REPO), f"work-{number}"],
            cwd=tmp_path,
            env=_client_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for number in range(2)
    ]


def test_two_clones_at_once_both_get_the_head(
    git_server: GitServer, credentials: str, tmp_path: Path
) -> None:
    git_server.create_repository(REPO, {"README.md": "hello\n"})
    head = git_server.push_large(REPO, 2)  # long enough a transfer for the two to overlap

    clones = _two_clones(git_server, credentials, tmp_path)
    outcomes = [clone.communicate(timeout=60) for clone in clones]

    assert [clone.returncode for clone in clones] == [0, 0], outcomes
    for number in range(2):
        assert ok(tmp_path / f"work-{number}", "rev-parse", "HEAD") == head
    packs = [r for r in git_server.requests if r.method == "POST" and r.status == 200]
    assert len(packs) >= 4  # ls-refs and fetch, for each


def test_two_clients_are_served_at_the_same_time(
    git_server: GitServer, credentials: str, tmp_path: Path
) -> None:
    head = git_server.create_repository(REPO)
    # each clone stalls twice (ls-refs, fetch): 3 s alone, 6 s if the server took turns
    git_server.stall_fetch = 1.5
    started = time.monotonic()

    clones = _two_clones(git_server, credentials, tmp_path)
    outcomes = [clone.communicate(timeout=60) for clone in clones]

    assert [clone.returncode for clone in clones] == [0, 0], outcomes
    assert time.monotonic() - started < 5
    assert all(ok(tmp_path / f"work-{n}", "rev-parse", "HEAD") == head for n in range(2))


def test_a_client_gone_mid_answer_leaves_the_server_serving(
    git_server: GitServer, credentials: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    git_server.create_repository(REPO)
    head = git_server.push_large(REPO, 16)  # far more than the socket buffers hold
    host, port = git_server.base_url.removeprefix("http://").split(":")
    wants = f"want {head}\n"
    body = f"{len(wants) + 4:04x}{wants}00000009done\n".encode()  # protocol v0 pkt-lines
    pair = f"{git_server.username}:{git_server.token}".encode()
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request(
        "POST",
        f"/{REPO}.git/git-upload-pack",
        body=body,
        headers={
            "Authorization": "Basic " + base64.b64encode(pair).decode(),
            "Content-Type": "application/x-git-upload-pack-request",
        },
    )
    response = connection.getresponse()
    assert response.status == 200
    assert response.read(8)  # the pack is on its way
    connection.close()  # and nobody reads the rest

    # the backend is killed, not left blocked on a pipe nobody reads
    deadline = time.monotonic() + 5
    while _http_backends() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _http_backends()
    ok(tmp_path, "clone", "-q", git_server.url(REPO), "work", credentials=credentials)
    assert ok(tmp_path / "work", "rev-parse", "HEAD") == head
    assert "Traceback" not in capfd.readouterr().err


def _http_backends() -> list[int]:
    """This process's `git http-backend` children that are still running (not zombies)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # gone meanwhile
        state, ppid = fields[0], int(fields[1])
        if ppid == os.getpid() and state != "Z" and b"http-backend" in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_a_switch_flipped_back_serves_again(git_server: GitServer, clone: Path) -> None:
    git_server.status = 500
    failed = git(clone, "fetch", "origin", credentials=_credentials_of(clone))
    assert failed.returncode != 0 and "500" in failed.stderr

    git_server.status = None
    new = git_server.push_commit(REPO, {"README.md": "again\n"})
    ok(clone, "fetch", "origin", credentials=_credentials_of(clone))

    assert ok(clone, "rev-parse", "origin/main") == new
    assert [r.status for r in git_server.requests_to(REPO)][-1] == 200


def test_a_bad_content_length_is_400_not_a_traceback(git_server: GitServer) -> None:
    git_server.create_repository(REPO)
    host, port = git_server.base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("POST", f"/{REPO}.git/git-upload-pack")
        connection.putheader("Content-Length", "-5")
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 400
        assert response.read() == b"bad Content-Length\n"
    finally:
        connection.close()


def test_the_server_stops_even_with_a_stalled_fetch(tmp_path: Path) -> None:
    with running_git_server(tmp_path / "repos") as server:
        server.create_repository(REPO)
        server.stall_fetch = 60
        credentials = _helper(server.username, server.write_token_file(tmp_path / "secrets"))
        fetch = subprocess.Popen(
            ["git", "-c", f"credential.helper={credentials}", "clone", server.url(REPO), "w"],
            cwd=tmp_path,
            env=_client_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not any(r.status == 200 for r in server.requests) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(r.status == 200 for r in server.requests), "the clone got to its fetch"
        time.sleep(1)  # its upload-pack POST, which stalls, follows the 200 within this
        started = time.monotonic()
    stopped_after = time.monotonic() - started
    try:
        assert stopped_after < 5
        host, port = server.base_url.removeprefix("http://").split(":")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=2).close()
        # the stalled answer is dropped, not sent late: the client fails now
        assert fetch.wait(timeout=5) != 0
    finally:
        fetch.kill()
        fetch.wait(timeout=10)


def _credentials_of(clone: Path) -> str:
    """The credential helper the clone fixture used (the token file beside it)."""
    token_file = clone.parent / "secrets" / "git-token"
    return _helper("rein", token_file)


def _raw_get(
    server: GitServer, path: str, *, authenticated: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """A GET sent as written: http.client normalizes no `..` away, unlike curl."""
    host, port = server.base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {}
    if authenticated:
        pair = f"{server.username}:{server.token}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()
