"""Run the HTTP API: in this process, or as N worker processes listening on one port.

One process runs one event loop on one core. On a machine with more cores than replicas
(a VM, a large pod) `serve --workers N` starts N processes that each listen on the port
with SO_REUSEPORT, so the kernel spreads new connections over them by address hash. (One
socket shared by all workers is what uvicorn does; measured here, whichever worker woke
first took nearly every keep-alive connection and the second core stayed idle.) This
process only supervises:

- SIGTERM or SIGINT: every worker is asked to stop (each drains its long polls, as a single
  process does), then waited for; one still running after the grace period is killed.
- A worker that exits on its own stops the others and `serve` exits 1. The orchestrator
  restarts the whole unit; a half-alive API that silently lost capacity is worse at night.
- A supervisor that is killed outright takes its workers with it: each watches it and
  stops (draining) when it is gone.

Metrics: with more than one worker, prometheus_client's multiprocess mode keeps every
worker's samples in files under a private directory, and /metrics, whichever worker
answers, reports their sum (queue/metrics.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "GRACEFUL_SHUTDOWN_SECONDS",
    "MAX_WORKERS",
    "WORKER_STOP_SECONDS",
    "DrainingServer",
    "Listen",
    "serve_in_this_process",
    "serve_with_workers",
    "uvicorn_config",
]

# uvicorn waits this long for requests in flight after a shutdown signal; a long-poll claim
# may hold a request open for up to 20 s, so do not wait for it (the worker simply claims
# again from another replica).
GRACEFUL_SHUTDOWN_SECONDS = 5
# How long the supervisor waits for its workers after asking them to stop.
WORKER_STOP_SECONDS = GRACEFUL_SHUTDOWN_SECONDS + 5
MAX_WORKERS = 64


@dataclass(frozen=True)
class Listen:
    host: str
    port: int


def uvicorn_config(app: Any, listen: Listen, trusted_proxies: Sequence[str] = ()) -> Any:
    """uvicorn's configuration for the API. X-Forwarded-For and -Proto are believed only
    from `trusted_proxies` (ACTIVITY_CORE_TRUSTED_PROXIES); none: not at all, whatever
    uvicorn's own FORWARDED_ALLOW_IPS says (its default trusts every local process)."""
    import uvicorn

    from activity_core.api_protocol import ApiHttpProtocol

    return uvicorn.Config(
        app,
        host=listen.host,
        port=listen.port,
        # httptools, each request bounded in size and time, each answer in one write
        # (api_protocol.py)
        http=ApiHttpProtocol,
        # The API has no WebSocket endpoint: an Upgrade request is an HTTP request like any
        # other, whatever WebSocket library a dependency may bring along one day.
        ws="none",
        log_config=None,
        access_log=False,
        # no `server: uvicorn` on every answer: it names the software to an attacker and
        # costs header work on every claim and close (the Date header stays, RFC 9110)
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=list(trusted_proxies),
    )


def _drain_long_polls(app: Any) -> None:
    queue = getattr(app.state, "queue", None)
    if queue is not None:
        queue.drain_long_polls()


class DrainingServer:
    """uvicorn's server, but a shutdown signal first ends the long-poll claims in flight,
    so they answer `{"runs": []}` instead of being cancelled mid-request."""

    def __init__(self, config: Any) -> None:
        import uvicorn

        app = config.app

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:
                    loop = None
                if loop is not None:
                    loop.call_soon_threadsafe(_drain_long_polls, app)
                super().handle_exit(sig, frame)

        self._server = Server(config)

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        self._server.run(sockets=sockets)


def freeze_the_loaded_heap() -> None:
    """Leave what is loaded by now (modules, the app, its routes and models: most of the
    heap, and all of it for the life of the process) out of every later garbage
    collection. A full collection would otherwise walk it again and again under load."""
    gc.collect()
    gc.freeze()


def serve_in_this_process(app: Any, listen: Listen, trusted_proxies: Sequence[str] = ()) -> int:
    freeze_the_loaded_heap()
    DrainingServer(uvicorn_config(app, listen, trusted_proxies)).run()
    return 0


def _listen_reusing_port(listen: Listen) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(
        listen.host, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _worker_main(dsn: str, listen: Listen) -> None:
    """A worker process: its own socket on the port, settings (from the same environment),
    app, pool and event loop."""
    from activity_core.http.app import create_app
    from activity_core.logs import configure_logging
    from activity_core.settings import load_settings

    try:
        sock = _listen_reusing_port(listen)
    except OSError as exc:
        print(
            f"activity-core: cannot listen on {listen.host}:{listen.port}: {exc.strerror}",
            file=sys.stderr,
        )
        sys.exit(1)
    settings = load_settings()
    configure_logging(settings.log_level)
    _stop_when_the_supervisor_dies()
    app = create_app(settings, dsn=dsn)
    freeze_the_loaded_heap()
    try:
        DrainingServer(uvicorn_config(app, listen, settings.trusted_proxies)).run(sockets=[sock])
    finally:
        # the last lines the loop left pending (logs.configure_logging batches them)
        logging.shutdown()


def _stop_when_the_supervisor_dies() -> None:
    """A worker outliving a SIGKILLed supervisor would keep serving unsupervised (and keep
    the port): when the supervisor's process ends, stop as if told to (drain, then exit)."""
    supervisor = multiprocessing.parent_process()
    if supervisor is None:
        return

    def watch() -> None:
        supervisor.join()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def serve_with_workers(dsn: str, listen: Listen, workers: int) -> int:
    """Run `workers` processes listening on the port; supervise them (see module doc)."""
    _remove_metrics_dirs_of_dead_supervisors()
    prefix = f"{_METRICS_DIR_PREFIX}{os.getpid()}-"
    with tempfile.TemporaryDirectory(prefix=prefix) as metrics_dir:
        # Read by prometheus_client when a worker imports it; set before any starts.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        context = multiprocessing.get_context("spawn")
        procs = [
            context.Process(
                target=_worker_main,
                args=(dsn, listen),
                name=f"activity-core-web-{n}",
                daemon=False,
            )
            for n in range(workers)
        ]
        stop = threading.Event()
        previous = {
            sig: signal.signal(sig, lambda *_: stop.set())
            for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            for proc in procs:
                proc.start()
            print(
                f"activity-core: serving on {listen.host}:{listen.port} with {workers} worker "
                f"processes (pids {', '.join(str(p.pid) for p in procs)})",
                file=sys.stderr,
                flush=True,
            )
            lost = _supervise(procs, stop)
        finally:
            _stop_all(procs)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if lost is not None:
        print(
            f"activity-core: worker process {lost.pid} exited with {lost.exitcode}; "
            "stopped the others",
            file=sys.stderr,
        )
        return 1
    return 0


_METRICS_DIR_PREFIX = "activity-core-metrics-"


def _remove_metrics_dirs_of_dead_supervisors() -> None:
    """A supervisor that was killed outright could not remove its metrics directory; the
    next one on this machine does. The directory names carry the supervisor's pid, and a
    directory whose pid is alive (or reused) is left alone."""
    for path in Path(tempfile.gettempdir()).glob(f"{_METRICS_DIR_PREFIX}*-*"):
        pid_text = path.name[len(_METRICS_DIR_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _supervise(
    procs: Sequence[multiprocessing.process.BaseProcess], stop: threading.Event
) -> multiprocessing.process.BaseProcess | None:
    """Wait for a stop signal (None) or a worker that exited on its own (that worker)."""
    while not stop.wait(0.2):
        for proc in procs:
            if not proc.is_alive():
                return proc
    return None


def _stop_all(procs: Sequence[multiprocessing.process.BaseProcess]) -> None:
    for proc in procs:
        if proc.pid is not None and proc.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + WORKER_STOP_SECONDS
    for proc in procs:
        if proc.pid is None:
            continue
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()
