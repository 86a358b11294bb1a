"""Network by allowlist: real bwrap, the real relay inside, the real proxy outside.

The provider is a stand-in the test starts on the host's loopback: an HTTP server and a
TCP echo server. The sandbox reaches them only through its egress proxy, listed as the
literal `127.0.0.1:<port>`; `localhost:<port>` is listed too, by name, and must be
refused because the name resolves to loopback.
"""

from __future__ import annotations

import http.server
import os
import socket
import socketserver
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ops_runtime.threaded_servers import served_in_a_thread
from rein_aharness.gateway.approaches.command import run_in_sandbox
from rein_aharness.profiles import SandboxChoice, SandboxProfile
from rein_aharness.profiles.model import NetworkAllowlist
from rein_aharness.sandbox import SandboxMounts
from rein_aharness.sandbox.egress_log import ConnectionRecord, EgressLog
from rein_aharness.sandbox.process import Sandbox
from rein_aharness.worker.metrics import WorkerMetrics
from rein_worker_kit import BWRAP, PATH, ActivityCore, Repos, RunCommand, git


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the provider\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@contextmanager
def _servers() -> Iterator[tuple[int, int]]:
    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    echo.daemon_threads = True
    with (
        served_in_a_thread(http_server, "egress-hello") as (_, http_port),
        served_in_a_thread(echo, "egress-echo") as (_, echo_port),
    ):
        yield http_port, echo_port


def _sandbox(tmp_path: Path, allow: list[str], log: EgressLog) -> Sandbox:
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    profile = SandboxProfile(kind="bwrap", network=NetworkAllowlist(allow=allow))
    return Sandbox(
        SandboxChoice("profile.egress", profile), BWRAP, SandboxMounts(worktree), egress=log
    )


async def _python(sandbox: Sandbox, script: str) -> tuple[int | None, str]:
    outcome = await run_in_sandbox(["python3", "-c", script], 30, sandbox, PATH)
    return outcome.returncode, outcome.output_tail.decode("utf-8", "replace")


_PROBE = """
import os, socket, urllib.request, urllib.error
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return f"{r.status} {r.read().decode().strip()}"
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.headers.get('X-Rein-Egress-Refused')}"
    except Exception as e:
        return f"error {type(e).__name__}"
def tunnel(host_port):
    s = socket.create_connection(("127.0.0.1", 3128), 5)
    s.sendall(f"CONNECT {host_port} HTTP/1.1\\r\\nHost: {host_port}\\r\\n\\r\\n".encode())
    head = s.recv(4096)
    if not head.startswith(b"HTTP/1.1 200"):
        return head.split(b"\\r\\n")[0].decode()
    s.sendall(b"ping through the tunnel")
    return "echo " + s.recv(4096).decode()
def raw(host, port):
    try:
        socket.create_connection((host, port), 3); return "CONNECTED"
    except OSError as e:
        return f"refused {e.errno}"
def dns(name):
    try:
        socket.getaddrinfo(name, 443); return "RESOLVED"
    except OSError as e:
        return "no-dns"
print("proxy", os.environ["HTTPS_PROXY"], repr(os.environ["NO_PROXY"]))
print("listed", get("http://127.0.0.1:{http}/hello"))
print("tunnel", tunnel("127.0.0.1:{echo}"))
print("unlisted-host", get("http://provider.invalid:{http}/"))
print("unlisted-port", tunnel("127.0.0.1:{other}"))
print("loopback-name", get("http://localhost:{http}/"))
print("raw-loopback", raw("127.0.0.1", {http}))
print("raw-host", raw("{host_ip}", {http}))
print("dns", dns("example.com"), dns("localhost"))
"""


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: picks the route's source
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


async def test_only_listed_destinations_are_reached_and_every_connection_is_counted(
    tmp_path: Path,
) -> None:
    log = EgressLog()
    metrics = WorkerMetrics()
    log.on_record = metrics.egress_connection
    with _servers() as (http_port, echo_port):
        other = echo_port + 1 if echo_port < 65535 else echo_port - 1
        allow = [f"127.0.0.1:{http_port}", f"127.0.0.1:{echo_port}", f"localhost:{http_port}"]
        sandbox = _sandbox(tmp_path, allow, log)
        script = (
            _PROBE.replace("{http}", str(http_port))
            .replace("{echo}", str(echo_port))
            .replace("{other}", str(other))
            .replace("{host_ip}", _host_ip())
        )
        code, out = await _python(sandbox, script)
    assert code == 0, out
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["proxy"] == "http://127.0.0.1:3128 ''"
    assert lines["listed"] == "200 hello from the provider"
    assert lines["tunnel"] == "echo ping through the tunnel"
    assert lines["unlisted-host"] == "403 not_listed"
    assert lines["unlisted-port"] == "HTTP/1.1 403 Forbidden"
    assert lines["loopback-name"] == "403 forbidden_address"
    assert lines["raw-loopback"].startswith("refused")
    assert lines["raw-host"].startswith("refused")
    assert lines["dns"] == "no-dns no-dns"

    evidence = sandbox.network_evidence()
    assert evidence is not None
    assert (evidence.mode, evidence.allowed, evidence.refused, evidence.failed) == (
        "allowlist",
        2,
        3,
        0,
    )
    by_reason = {(d.host, d.port, d.reason): d for d in evidence.destinations or []}
    assert by_reason[("127.0.0.1", http_port, None)].bytes_down > 0
    assert by_reason[("127.0.0.1", echo_port, None)].bytes_up == len("ping through the tunnel")
    assert ("provider.invalid", http_port, "not_listed") in by_reason
    assert ("127.0.0.1", other, "not_listed") in by_reason
    assert ("localhost", http_port, "forbidden_address") in by_reason

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sample("ops_worker_egress_connections_total", outcome="allowed") == 2
    assert sample("ops_worker_egress_connections_total", outcome="refused") == 3
    assert (sample("ops_worker_egress_bytes_total", direction="down") or 0) > 0


async def test_the_proxy_socket_lives_exactly_as_long_as_the_approach(tmp_path: Path) -> None:
    seen: list[ConnectionRecord] = []
    sandbox = _sandbox(tmp_path, ["127.0.0.1:9"], EgressLog(seen.append))
    before = set(Path("/tmp").glob("rein-egress-*"))
    # Killed by its timeout while it holds a tunnel open: the proxy still goes away.
    script = (
        "import socket, time; s = socket.create_connection(('127.0.0.1', 3128), 5); "
        "s.sendall(b'CONNECT 127.0.0.1:9 HTTP/1.1\\r\\n\\r\\n'); print(s.recv(100)); "
        "print(open('/proc/self/mountinfo').read().count('rein-egress')); time.sleep(60)"
    )
    outcome = await run_in_sandbox(["python3", "-c", script], 3, sandbox, PATH)
    assert outcome.timed_out
    assert set(Path("/tmp").glob("rein-egress-*")) == before
    assert [(r.outcome, r.reason) for r in seen] == [("failed", "connect_failed")]


async def test_open_network_is_marked_and_no_network_is_absent(tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    worktree.mkdir()
    open_net = SandboxChoice("profile.net", SandboxProfile(kind="bwrap", network=True))
    closed = SandboxChoice("profile.bwrap-local", SandboxProfile(kind="bwrap"))
    evidence = Sandbox(open_net, BWRAP, SandboxMounts(worktree)).network_evidence()
    assert evidence is not None and evidence.model_dump(exclude_none=True) == {"mode": "open"}
    assert Sandbox(closed, BWRAP, SandboxMounts(worktree)).network_evidence() is None


# -- the escape suite, through the whole worker, with the socket and the relay in place --

_ATTACK = r"""
python3 - > briefs/result.md 2>&1 <<'PY'
import os, socket, urllib.request, urllib.error
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return f"{r.status} {r.read().decode().strip()}"
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.headers.get('X-Rein-Egress-Refused')}"
def unix(address):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(address); return "CONNECTED"
    except OSError as e:
        return f"refused {e.errno}"
print("listed", get("http://127.0.0.1:@HTTP@/hello"))
print("via-socket-unlisted", get("http://10.0.0.1:@HTTP@/"))
print("abstract", unix("\0@ABSTRACT@"))
print("mounted", sorted(os.listdir("/run/rein-egress")))
try:
    os.unlink("/run/rein-egress/proxy.sock"); print("UNLINKED")
except OSError as e:
    print("unlink refused", e.errno)
print("dns", [x for x in ["resolv.conf", "hosts"] if os.path.exists("/etc/" + x)])
PY
git add briefs && git commit -qm result
"""


async def test_escape_through_the_proxy_socket_and_the_worker_s_other_sockets(
    activity_core: ActivityCore, repos: Repos, run_command: RunCommand
) -> None:
    repo = repos.make()
    abstract = f"rein-test-{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0" + abstract)  # the worker's network namespace's abstract socket
    listener.listen(1)
    with _servers() as (http_port, _), listener:
        sandboxes = (
            "sandbox_profiles:\n"
            "  profile.egress:\n"
            "    kind: bwrap\n"
            f'    network: {{allow: ["127.0.0.1:{http_port}"]}}\n'
        )
        script = _ATTACK.replace("@HTTP@", str(http_port)).replace("@ABSTRACT@", abstract)
        before = set(Path(tempfile.gettempdir()).glob("rein-egress-*"))
        run_id, runtime = await run_command(
            "egress", script, sandbox="profile.egress", sandboxes=sandboxes
        )
    [report] = runtime.worker.reports
    assert report.close is not None and report.close.state == "delivered"
    row = dict(await activity_core.row(run_id))
    assert row["state"] == "succeeded", row
    [ref] = Repos.landings(repo)
    landed = git(repo, "show", f"{ref}:briefs/result.md")
    lines = dict(line.split(" ", 1) for line in landed.splitlines() if " " in line)
    assert lines["listed"] == "200 hello from the provider", landed
    assert lines["via-socket-unlisted"] == "403 not_listed"
    assert lines["abstract"].startswith("refused")
    assert lines["mounted"] == "['proxy.sock', 'relay.py']"
    assert lines["unlink"].startswith("refused") and "UNLINKED" not in landed
    assert lines["dns"] == "[]"
    assert set(Path(tempfile.gettempdir()).glob("rein-egress-*")) == before
    evidence = row["result"]["execution_evidence"]
    egress = evidence["network_egress"]
    assert (egress["mode"], egress["allowed"], egress["refused"], egress["failed"]) == (
        "allowlist",
        1,
        1,
        0,
    )
    assert egress["bytes_down"] > 0


def test_the_allowlisted_command_line_keeps_its_own_network_and_binds_the_proxy() -> None:
    from rein_aharness.sandbox.bwrap import SystemPaths, bwrap_arguments
    from rein_aharness.sandbox.egress import EgressMount

    system = SystemPaths(
        symlinks=(),
        directories=(),
        etc=("/etc/passwd",),
        etc_network=("/etc/resolv.conf", "/etc/hosts", "/etc/ssl"),
    )
    mount = EgressMount(Path("/tmp/rein-egress-x/proxy.sock"), "/usr/bin/python3", Path("/r.py"))
    profile = SandboxProfile(kind="bwrap", network=NetworkAllowlist(allow=["a.example:443"]))
    args = bwrap_arguments(
        Path("/b/bwrap"),
        profile,
        SandboxMounts(Path("/w")),
        mount.wrap(["agent", "--go"]),
        system=system,
        block_fd=5,
        status_fd=7,
        egress=mount,
    )
    line = " ".join(args)
    assert "--share-net" not in args and "--unshare-all" in args
    assert "/etc/resolv.conf" not in args and "/etc/hosts" not in args
    assert "--ro-bind /etc/ssl /etc/ssl" in line
    assert (
        "--ro-bind /tmp/rein-egress-x/proxy.sock /run/rein-egress/proxy.sock "
        "--ro-bind /r.py /run/rein-egress/relay.py --chdir /workspace"
    ) in line
    assert line.endswith(
        "-- /usr/bin/python3 -I /run/rein-egress/relay.py 3128 /run/rein-egress/proxy.sock "
        "-- agent --go"
    )
