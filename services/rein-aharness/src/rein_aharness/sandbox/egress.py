"""How an allowlisted sandbox reaches its egress proxy: the mounts, the relay in front of
the approach, and the proxy variables.

With `network: {allow: [...]}` the sandbox keeps its own network namespace (loopback
only, no `--share-net`, no DNS files) and gets, read-only under `/run/rein-egress/`:

| path                          | what                                                 |
| ----------------------------- | ---------------------------------------------------- |
| `/run/rein-egress/proxy.sock` | this attempt's proxy socket (egress_proxy.py)        |
| `/run/rein-egress/relay.py`   | the loopback relay (egress_relay.py), run first      |

The approach then runs under the relay (`python3 -I relay.py 3128 proxy.sock -- argv`),
with `HTTPS_PROXY`, `HTTP_PROXY`, `https_proxy` and `http_proxy` set to
`http://127.0.0.1:3128` and `NO_PROXY`/`no_proxy` empty, so that no destination is
exempt from the proxy (there is nothing it could reach directly anyway). A connect to
the socket is allowed on a read-only bind (the kernel checks write access only for
regular files, directories and symlinks), so the approach cannot remove or replace it.

The relay runs on the sandbox's Python: the worker's own interpreter when it lives under
/usr (the image's /usr/local/bin/python3), else /usr/bin/python3; with neither, the
sandbox counts as unavailable (SandboxUnavailable), since the allowlist cannot be
honoured.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rein_aharness.profiles.model import NetworkAllowlist
from rein_aharness.sandbox.egress_log import EgressLog
from rein_aharness.sandbox.egress_policy import EgressPolicy, Resolver, system_resolver
from rein_aharness.sandbox.egress_proxy import ProxyLimits, egress_proxy

__all__ = [
    "RELAY_PORT",
    "SANDBOX_RELAY",
    "SANDBOX_SOCKET",
    "EgressMount",
    "EgressUnavailable",
    "attached_egress",
    "sandbox_python",
]

RELAY_PORT = 3128
_SANDBOX_DIR = PurePosixPath("/run/rein-egress")
SANDBOX_SOCKET = _SANDBOX_DIR / "proxy.sock"
SANDBOX_RELAY = _SANDBOX_DIR / "relay.py"
_RELAY_SOURCE = Path(__file__).with_name("egress_relay.py")


class EgressUnavailable(Exception):
    """The allowlist cannot be honoured on this host (no Python for the relay)."""


@dataclass(frozen=True)
class EgressMount:
    socket: Path  # the proxy's socket on the host
    python: str  # the interpreter inside the sandbox
    relay_source: Path = _RELAY_SOURCE

    def bwrap_args(self) -> list[str]:
        return [
            "--ro-bind",
            os.fspath(self.socket),
            str(SANDBOX_SOCKET),
            "--ro-bind",
            os.fspath(self.relay_source),
            str(SANDBOX_RELAY),
        ]

    def wrap(self, argv: Sequence[str]) -> list[str]:
        relay = [self.python, "-I", str(SANDBOX_RELAY), str(RELAY_PORT), str(SANDBOX_SOCKET)]
        return [*relay, "--", *argv]

    @staticmethod
    def environment() -> dict[str, str]:
        url = f"http://127.0.0.1:{RELAY_PORT}"
        proxies = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
        return {**dict.fromkeys(proxies, url), "NO_PROXY": "", "no_proxy": ""}


def sandbox_python(executable: str = sys.executable) -> str | None:
    own = os.path.realpath(executable)
    if own.startswith("/usr/") and os.access(own, os.X_OK):
        return own
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else None


@asynccontextmanager
async def attached_egress(
    network: NetworkAllowlist,
    log: EgressLog,
    *,
    resolver: Resolver = system_resolver,
    limits: ProxyLimits | None = None,
) -> AsyncIterator[EgressMount]:
    """This attempt's proxy, for as long as the context: its mount for the sandbox."""
    python = sandbox_python()
    if python is None:
        raise EgressUnavailable("no python3 under /usr to run the sandbox's egress relay")
    async with egress_proxy(EgressPolicy(network.targets, resolver), log, limits) as socket:
        yield EgressMount(socket, python)
