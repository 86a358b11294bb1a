"""Readiness probes and waiting: ports, HTTP answers, log lines, and a polling wait.

A probe is a callable a `ManagedProcess` (processes.py) is polled with until it is ready;
`wait_until` is the same poll for anything else a test or the demo waits for.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ops_devsupport.processes import ManagedProcess

__all__ = [
    "LOCAL_HOST",
    "Probe",
    "all_of",
    "free_port",
    "http_ok",
    "log_contains",
    "port_is_open",
    "port_open",
    "wait_until",
]

LOCAL_HOST = "127.0.0.1"

Probe = Callable[["ManagedProcess"], bool]


# -- ports and probes -------------------------------------------------------------------


def free_port(host: str = LOCAL_HOST) -> int:
    """A TCP port nobody is bound to right now, below the OS's ephemeral range (why:
    activity_core.temporal.dev_server.free_port)."""
    from activity_core.temporal.dev_server import free_port as chosen_port

    return chosen_port(host)


def port_is_open(host: str, port: int, *, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_open(port: int, host: str = LOCAL_HOST) -> Probe:
    """Ready when `host:port` accepts a TCP connection."""

    def probe(_: ManagedProcess) -> bool:
        return port_is_open(host, port)

    return probe


def http_ok(url: str, *, status: int = 200, timeout: float = 1.0) -> Probe:
    """Ready when a GET of `url` answers `status`."""

    def probe(_: ManagedProcess) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return bool(response.status == status)
        except urllib.error.HTTPError as exc:
            return exc.code == status
        except (OSError, ValueError):
            return False

    return probe


def log_contains(text: str) -> Probe:
    """Ready when the process's output since its latest start contains `text`."""

    def probe(process: ManagedProcess) -> bool:
        return text in process.output()

    return probe


def all_of(*probes: Probe) -> Probe:
    def probe(process: ManagedProcess) -> bool:
        return all(check(process) for check in probes)

    return probe


# -- the process tree -----------------------------------------------------------------


# -- waiting --------------------------------------------------------------------------


def wait_until(
    condition: Callable[[], object],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    describe: Callable[[], str] | None = None,
) -> object:
    """Poll `condition` until it returns something truthy (returned); TimeoutError naming
    `what`, with `describe()` appended, when `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{describe()}" if describe is not None else ""
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(interval)


# -- at exit --------------------------------------------------------------------------
