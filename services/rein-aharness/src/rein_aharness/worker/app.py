"""Wire the worker from settings, and `rein-aharness run` itself.

`open_worker` builds every component (queue client, outbox, gateway, legacy runner,
event sink, and the one `WorkerMetrics` they all record into) from one `ReinAharnessSettings` and
closes them afterwards; tests pass their own transports. Before it creates anything it
refuses a state directory that lies inside the repositories root, or a root inside the
state directory (symlinks resolved): the outbox and worktrees must live outside target
checkouts, and an approach's repository must not contain the worker's state.
`run_worker` adds what only the process needs: the state directory's worker lock, the
sweep of worktrees a killed predecessor left, the optional metrics and liveness
endpoints, and SIGTERM/SIGINT handling.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import signal
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx

from ops_contracts import LabelsMode
from ops_runtime.liveness import serve_liveness
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.gateway import (
    GlasGateway,
    HttpGlasGateway,
    LocalGlasGateway,
    WithdrawLanding,
)
from rein_aharness.operator.commands import changes_store, glas_changes_client
from rein_aharness.operator.exit_codes import ExitCode, exit_code_for
from rein_aharness.outbox import OutboxPathError, OutboxStore, resolve_outbox_root
from rein_aharness.outbox.locking import ensure_lock_file
from rein_aharness.outbox.paths import default_state_dir
from rein_aharness.profiles import CatalogueError, ProfileCatalogue, load_catalogue
from rein_aharness.repository import sweep_worktrees
from rein_aharness.repository.changes_store import ChangesStore
from rein_aharness.sandbox import SandboxGate, resolve_bwrap
from rein_aharness.settings import ReinAharnessSettings, SettingsError, parse_bind_address
from rein_aharness.worker.closer import Closer
from rein_aharness.worker.events import EventSink, HttpEventSink, LogEventSink
from rein_aharness.worker.legacy import LegacyRunner
from rein_aharness.worker.loop import Worker, WorkerConfig, run_watched
from rein_aharness.worker.metrics import WorkerMetrics, serve_metrics
from rein_aharness.worker.processor import RunProcessor

__all__ = [
    "Transports",
    "WorkerRuntime",
    "check_state_outside_repositories",
    "hold_worker_lock",
    "load_worker_catalogue",
    "open_worker",
    "run_worker",
    "state_dir_for",
]

log = logging.getLogger(__name__)

WORKTREES_DIR = "worktrees"
CHANGES_DIR = "changes"
WORKER_LOCK = "worker.lock"


@dataclass(frozen=True)
class Transports:
    """Injected HTTP transports (tests); None means a real network connection."""

    queue: httpx.AsyncBaseTransport | None = None
    glas: httpx.AsyncBaseTransport | None = None
    events: httpx.AsyncBaseTransport | None = None


@dataclass(frozen=True)
class WorkerRuntime:
    worker: Worker
    store: OutboxStore
    state_dir: Path
    worktrees_root: Path
    metrics: WorkerMetrics
    changes: ChangesStore | None = None


def state_dir_for(settings: ReinAharnessSettings, environ: Mapping[str, str] | None = None) -> Path:
    return settings.rein_aharness_state_dir or default_state_dir(environ)


def load_worker_catalogue(settings: ReinAharnessSettings) -> ProfileCatalogue:
    """The catalogue `run` needs; SettingsError naming REIN_AHARNESS_PROFILES otherwise."""
    if settings.rein_aharness_profiles is None:
        raise SettingsError("REIN_AHARNESS_PROFILES: required for run")
    try:
        return load_catalogue(settings.rein_aharness_profiles)
    except CatalogueError as exc:
        raise SettingsError(f"REIN_AHARNESS_PROFILES: {exc}") from None


def check_state_outside_repositories(settings: ReinAharnessSettings, state_dir: Path) -> None:
    """SettingsError naming both variables when the state directory and the
    repositories root are the same directory or one lies inside the other."""
    root = settings.rein_aharness_repositories_root
    if root is None:
        return
    state = state_dir.resolve()
    repositories = root.resolve()
    state_name = (
        "REIN_AHARNESS_STATE_DIR"
        if settings.rein_aharness_state_dir is not None
        else "REIN_AHARNESS_STATE_DIR (unset: the default)"
    )
    where = f"{state_name} {state} and REIN_AHARNESS_REPOSITORIES_ROOT {repositories}"
    if state == repositories:
        relation = "are the same directory"
    elif state.is_relative_to(repositories):
        relation = "overlap: the state directory lies inside the repositories root"
    elif repositories.is_relative_to(state):
        relation = "overlap: the repositories root lies inside the state directory"
    else:
        return
    raise SettingsError(
        f"{where} {relation}; the worker's state must live outside the repositories"
    )


def _required(settings: ReinAharnessSettings) -> tuple[str, str]:
    if settings.activity_core_url is None:
        raise SettingsError("ACTIVITY_CORE_URL: required for run")
    if settings.activity_core_worker_id is None:
        raise SettingsError("ACTIVITY_CORE_WORKER_ID: required for run")
    if settings.rein_aharness_glas_url is None and settings.rein_aharness_repositories_root is None:
        raise SettingsError(
            "REIN_AHARNESS_REPOSITORIES_ROOT: required for run with the local gateway "
            "(REIN_AHARNESS_GLAS_URL unset)"
        )
    return str(settings.activity_core_url), settings.activity_core_worker_id


@asynccontextmanager
async def open_worker(
    settings: ReinAharnessSettings,
    catalogue: ProfileCatalogue,
    *,
    labels: Sequence[str] | None = None,
    labels_mode: LabelsMode = LabelsMode.any,
    transports: Transports | None = None,
    retry: RetryPolicy | None = None,
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[WorkerRuntime]:
    base_url, worker_id = _required(settings)
    transports = transports or Transports()
    state_dir = state_dir_for(settings, environ)
    check_state_outside_repositories(settings, state_dir)
    # Refuses an untrusted, replaced or emptied outbox (outbox/trust.py, identity.py).
    store = OutboxStore(resolve_outbox_root(state_dir, environ), identity=worker_id)
    metrics = WorkerMetrics(store)
    worktrees_root = state_dir / WORKTREES_DIR
    token = settings.activity_core_worker_token
    source = settings.repository_source()

    config = WorkerConfig(
        worker_id=worker_id,
        labels=tuple(labels) if labels else None,
        labels_mode=labels_mode,
        lease_seconds=settings.rein_aharness_lease_seconds,
        wait_seconds=settings.rein_aharness_wait_seconds,
        shutdown_grace_seconds=settings.rein_aharness_shutdown_grace_seconds,
        outage_backoff_seconds=settings.rein_aharness_backoff_seconds,
    )
    client = ActivityCoreQueueClient(
        base_url,
        token.get_secret_value() if token is not None else None,
        transport=transports.queue,
        # A claim long-polls; every other request is short.
        timeout_seconds=30.0,
        retry=retry,
    )
    bwrap = resolve_bwrap(settings.rein_aharness_bwrap)
    gate = SandboxGate.for_catalogue(
        catalogue, bwrap, local_profiles=settings.rein_aharness_glas_url is None
    )
    gateway: GlasGateway
    remote: HttpGlasGateway | None = None
    changes: ChangesStore | None = None
    withdraw: WithdrawLanding | None = None
    glas_changes = glas_changes_client(settings, transport=transports.glas, retry=retry)
    if settings.rein_aharness_glas_url is not None:
        assert glas_changes is not None
        glas_token = settings.rein_aharness_glas_token
        changes = changes_store(settings, state_dir, glas_changes)
        remote = HttpGlasGateway(
            str(settings.rein_aharness_glas_url),
            glas_token.get_secret_value() if glas_token is not None else None,
            transport=transports.glas,
            timeout_seconds=settings.rein_aharness_glas_timeout_seconds,
            retry=retry,
            changes=(glas_changes, changes),
        )
        gateway = remote
    else:
        assert settings.rein_aharness_repositories_root is not None
        local = LocalGlasGateway(
            repositories_root=settings.rein_aharness_repositories_root,
            worktrees_root=worktrees_root,
            environ=environ,
            bwrap=bwrap,
            on_sandbox_failure=gate.report_failure,
            on_egress=metrics.egress_connection,
            source=source,
            changes_dir=state_dir / CHANGES_DIR,
            changes_max_bytes=settings.rein_aharness_changes_max_bytes,
        )
        gateway, withdraw = local, local.withdraw
        changes = changes_store(settings, state_dir)
    sink: HttpEventSink | None = None
    events: EventSink
    if settings.rein_aharness_event_sink_url is not None:
        sink = HttpEventSink(
            str(settings.rein_aharness_event_sink_url), transport=transports.events, retry=retry
        )
        events = sink
    else:
        events = LogEventSink()
    try:
        closer = Closer(
            client=client,
            store=store,
            events=events,
            worker_id=worker_id,
            withdraw_landing=withdraw,
            changes=changes,
            on_upload=metrics.changes_uploaded,
        )
        processor = RunProcessor(
            client=client,
            catalogue=catalogue,
            gateway=gateway,
            legacy=LegacyRunner(
                repositories_root=settings.rein_aharness_repositories_root,
                worktrees_root=worktrees_root,
                environ=environ,
                bwrap=bwrap,
                on_sandbox_failure=gate.report_failure,
                source=source,
            ),
            closer=closer,
            worker_id=worker_id,
            lease_seconds=config.lease_seconds,
            allow_unsandboxed=settings.rein_aharness_allow_unsandboxed,
            metrics=metrics,
            withdraw_landing=withdraw,
        )
        worker = Worker(
            config=config,
            client=client,
            closer=closer,
            processor=processor,
            sandbox_gate=gate,
            metrics=metrics,
        )
        yield WorkerRuntime(worker, store, state_dir, worktrees_root, metrics, changes)
    finally:
        with anyio.CancelScope(shield=True):
            await client.aclose()
            if remote is not None:
                await remote.aclose()
            if glas_changes is not None:
                await glas_changes.aclose()
            if sink is not None:
                await sink.aclose()


@contextmanager
def hold_worker_lock(state_dir: Path) -> Iterator[None]:
    """One `run` per state directory (its worktrees are swept at start); the kernel
    releases the lock when the process dies, SIGKILL included."""
    path = state_dir / WORKER_LOCK
    ensure_lock_file(path)
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutboxPathError(f"another rein-aharness run holds {path}") from None
            raise
        yield
    finally:
        os.close(fd)


async def run_worker(
    settings: ReinAharnessSettings,
    catalogue: ProfileCatalogue,
    *,
    once: bool,
    labels: Sequence[str] | None = None,
    labels_mode: LabelsMode = LabelsMode.any,
    transports: Transports | None = None,
    retry: RetryPolicy | None = None,
    stop: anyio.Event | None = None,
) -> ExitCode:
    """The `run` command: the worker until SIGTERM/SIGINT (or one turn with `once`).

    Exit code: the outbox's, as `close-outbox status` reports it (0 clean, 1 pending,
    3 quarantined), so a supervisor sees undelivered closes.
    """
    stop = stop or anyio.Event()
    async with open_worker(
        settings,
        catalogue,
        labels=labels,
        labels_mode=labels_mode,
        transports=transports,
        retry=retry,
    ) as runtime:
        with (
            hold_worker_lock(runtime.state_dir),
            _metrics(settings, runtime.metrics),
            _liveness(settings),
        ):
            swept = await sweep_worktrees(runtime.worktrees_root)
            if swept:
                log.info("removed %d worktrees left by an earlier run", swept)
            if runtime.changes is not None:
                pruned = await anyio.to_thread.run_sync(
                    runtime.changes.prune, runtime.store.pending_records()
                )
                if pruned:
                    log.info("removed %d changes bundles no pending close refers to", pruned)
            await run_watched(
                functools.partial(runtime.worker.run, once=once, stop=stop),
                functools.partial(_stop_on_signals, stop),  # returns never: only the run ends it
            )
        return exit_code_for(runtime.store.snapshot())


@contextmanager
def _metrics(settings: ReinAharnessSettings, metrics: WorkerMetrics) -> Iterator[None]:
    """The metrics endpoint for the block, when REIN_AHARNESS_METRICS_ADDRESS is set."""
    address = settings.rein_aharness_metrics_address
    with ExitStack() as stack:
        if address is not None:
            host, port = parse_bind_address(address)
            try:
                stack.enter_context(serve_metrics(metrics.registry, host, port))
            except OSError as exc:
                raise SettingsError(
                    f"REIN_AHARNESS_METRICS_ADDRESS: cannot listen on {address}: "
                    f"{exc.strerror or type(exc).__name__}"
                ) from None
        yield


@contextmanager
def _liveness(settings: ReinAharnessSettings) -> Iterator[None]:
    """The liveness endpoint for the block, when REIN_AHARNESS_LIVENESS_ADDRESS is set."""
    address = settings.rein_aharness_liveness_address
    with ExitStack() as stack:
        if address is not None:
            host, port = parse_bind_address(address)
            max_stall = settings.rein_aharness_liveness_max_stall_seconds
            try:
                stack.enter_context(serve_liveness(host, port, max_stall_seconds=max_stall))
            except OSError as exc:
                raise SettingsError(
                    f"REIN_AHARNESS_LIVENESS_ADDRESS: cannot listen on {address}: "
                    f"{exc.strerror or type(exc).__name__}"
                ) from None
        yield


async def _stop_on_signals(stop: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
        async for signum in received:
            log.info("received %s: stopping after the current run", signal.Signals(signum).name)
            stop.set()
