"""The worker's Prometheus metrics, in one registry it owns, and the optional endpoint
that serves them: `REIN_AHARNESS_METRICS_ADDRESS=host:port`.

Every name starts `ops_worker_` (activity-core's start `ops_runs` / `ops_run` / `ops_http`).
Labels take only the values listed here, never a run id, so each pod exports a fixed,
small set of series; every counter is exported at 0 from the start for each of them, so
rate() and increase() see a run's first occurrence too.

Recorded as the worker works (loop.py, processor.py, lease.py):

    ops_worker_claims_total{result}           claim requests: claimed (a run), empty,
                                              error (refused or unreachable)
    ops_worker_turns_skipped_total{reason}    turns that claimed nothing on purpose:
                                              replay_stopped (pending closes could not
                                              be delivered), sandbox_unavailable
    ops_worker_runs_total{outcome}            claimed runs by how they ended (RUN_OUTCOMES)
    ops_worker_execution_failures_total{reason}  why a run was failed or refused
                                              (FAILURE_REASONS; remote mode's failed
                                              fetches are repository_unavailable,
                                              _credentials_refused, _not_found,
                                              _too_large: gateway/errors.py)
    ops_worker_closes_total{path, result}     each run's own close: the disposition when
                                              delivered, else where it stands (CLOSE_RESULTS)
    ops_worker_heartbeats_total{result}       ok, failed (will retry; or cut short by
                                              the deadline), refused
    ops_worker_outbox_replays_total{outcome}  entries the loop's replay passes handled:
                                              delivered (a close left pending by an
                                              earlier turn or process, delivered now),
                                              cancelled (settled: the run was cancelled
                                              by an operator), failed (still pending),
                                              quarantined,
                                              skipped, set_aside (REPLAY_OUTCOMES)
    ops_worker_egress_connections_total{outcome}  connections to an allowlisted sandbox's
                                              egress proxy: allowed, refused, failed
    ops_worker_egress_bytes_total{direction}  bytes it relayed: up (from the approach),
                                              down
    ops_worker_execution_duration_seconds{selection}  histogram, profiled or legacy
    ops_worker_close_duration_seconds{path}   histogram, outbox or direct

Read from the close outbox at each scrape (one `snapshot`, under the store's shared
lock), so they say what `close-outbox status` says at that moment:

    ops_worker_close_outbox_pending                    entries waiting for delivery
    ops_worker_close_outbox_oldest_pending_age_seconds how long the oldest of them has
                                                       waited (0: none pending)
    ops_worker_close_outbox_quarantined{reason="..."}  quarantined material by reason
                                                       (foreign_worker_identity,
                                                       conclusive_refusal, ...)
    ops_worker_close_outbox_delivered                  delivered records kept
    ops_worker_close_outbox_readable                   1; 0 when the outbox could not
                                                       be read (then the others are
                                                       absent)

Each worker pod counts its own runs and has an outbox of its own, so across pods the
counters, histograms and outbox counts add up (sum) and the age is the largest one (max);
deploy/README.md lists every metric with its aggregation.

prometheus_client's HTTP server answers `/metrics` from a daemon thread, with a read
timeout (serve_metrics); `run` stops it when it ends. Unset: no endpoint, no thread (the
counters still count).
"""

from __future__ import annotations

import logging
import socket
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from ops_runtime.threaded_servers import served_in_a_thread
from rein_aharness.outbox import OutboxError, OutboxSnapshot, OutboxStore, ReplayReport
from rein_aharness.sandbox.egress_log import ConnectionRecord

__all__ = [
    "CLAIM_RESULTS",
    "CLOSE_RESULTS",
    "FAILURE_REASONS",
    "HEARTBEAT_RESULTS",
    "REPLAY_OUTCOMES",
    "RUN_OUTCOMES",
    "SCRAPE_READ_SECONDS",
    "SKIP_REASONS",
    "OutboxCollector",
    "WorkerMetrics",
    "oldest_pending_age",
    "serve_metrics",
]

log = logging.getLogger(__name__)

_OUTBOX = "ops_worker_close_outbox"

# Each Literal is the one list of its label's values; the tuple beside it is the same
# list at run time (get_args), for the series exported from the start.
ClaimResult = Literal["claimed", "empty", "error"]
CLAIM_RESULTS: Final = get_args(ClaimResult)

SkipReason = Literal["replay_stopped", "sandbox_unavailable"]
SKIP_REASONS: Final = get_args(SkipReason)

# completed: closed as complete; failed: closed as fail, not to be retried;
# failed_reopen: closed as fail asking the queue to reopen it (below its attempt ceiling
# it is claimed again); refused: failed before anything ran (profile, grant, sandbox
# kind); lease_lost: the lease ended during execution, nothing closed; abandoned: cut
# short at shutdown, nothing closed.
RunOutcome = Literal["completed", "failed", "failed_reopen", "refused", "lease_lost", "abandoned"]
RUN_OUTCOMES: Final = get_args(RunOutcome)

# processor.py maps selection refusals and each gateway error class onto one of these.
FailureReason = Literal[
    "refused_before_execution",
    "gateway_refused",
    "secret_unavailable",
    "sandbox_failed",
    "work_rejected",
    "approach_failed",
    "approach_timed_out",
    "gateway_unavailable",
    "gateway_protocol_error",
    "glas_outcome",
    "repository_unavailable",
    "repository_credentials_refused",
    "repository_not_found",
    "repository_too_large",
    "internal_error",
]
FAILURE_REASONS: Final = get_args(FailureReason)

# Per close path, the results it can have (closer.py, CloseReport): a delivered close by
# its disposition; an outboxed one may stay pending, be quarantined or conflict with the
# attempt's entry; a direct one may be refused or lost.
_DISPOSITIONS = ("applied", "reconciled", "reopened")
CLOSE_RESULTS: Final = {
    "outbox": (*_DISPOSITIONS, "cancelled", "pending", "quarantined", "conflict"),
    "direct": (*_DISPOSITIONS, "refused", "lost"),
}

# What a replay pass did with each entry (outbox/replay.py's Outcome).
REPLAY_OUTCOMES: Final = (
    "delivered",
    "cancelled",
    "failed",
    "quarantined",
    "skipped",
    "set_aside",
)

HeartbeatResult = Literal["ok", "failed", "refused"]
HEARTBEAT_RESULTS: Final = get_args(HeartbeatResult)

Selection = Literal["profiled", "legacy"]
SELECTIONS: Final = get_args(Selection)

UPLOAD_RESULTS = ("stored", "already_stored", "refused", "other")
_EGRESS_OUTCOMES = ("allowed", "refused", "failed")
_EGRESS_DIRECTIONS = ("up", "down")

# An execution runs from seconds (a brief) to the lease-kept hour of a long command.
_EXECUTION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# A close is an fsync'd enqueue and one HTTP request, or bounded retries of it.
_CLOSE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class _Family:
    """One metric family: its name, help text and labels, and the label values it
    exports (at 0) from the start. With buckets, a histogram; else a counter."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    series: tuple[tuple[str, ...], ...]
    buckets: tuple[float, ...] | None = None


def _each(values: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    """The series of a family with one label: one per value."""
    return tuple((value,) for value in values)


# Every family the worker records, in the order the endpoint exports them.
_FAMILIES: Final = {
    "claims": _Family(
        "ops_worker_claims",
        "claim requests by result: claimed (a run), empty, error",
        ("result",),
        _each(CLAIM_RESULTS),
    ),
    "skipped": _Family(
        "ops_worker_turns_skipped",
        "loop turns that claimed nothing on purpose, by reason",
        ("reason",),
        _each(SKIP_REASONS),
    ),
    "runs": _Family(
        "ops_worker_runs", "claimed runs by how they ended", ("outcome",), _each(RUN_OUTCOMES)
    ),
    "failures": _Family(
        "ops_worker_execution_failures",
        "runs failed or refused, by reason",
        ("reason",),
        _each(FAILURE_REASONS),
    ),
    "closes": _Family(
        "ops_worker_closes",
        "runs' closes by path and result (the disposition when delivered)",
        ("path", "result"),
        tuple((path, result) for path, results in CLOSE_RESULTS.items() for result in results),
    ),
    "replays": _Family(
        "ops_worker_outbox_replays",
        "close outbox entries the worker loop's replay passes handled, by outcome",
        ("outcome",),
        _each(REPLAY_OUTCOMES),
    ),
    "uploads": _Family(
        "ops_worker_changes_uploads",
        "changes bundle uploads before a close: stored, already_stored, refused",
        ("result",),
        _each(UPLOAD_RESULTS),
    ),
    "heartbeats": _Family(
        "ops_worker_heartbeats",
        "heartbeats by result: ok, failed (will retry), refused (the lease is lost)",
        ("result",),
        _each(HEARTBEAT_RESULTS),
    ),
    "egress": _Family(
        "ops_worker_egress_connections",
        "connections to sandboxes' egress proxies, by outcome (allowed, refused, failed)",
        ("outcome",),
        _each(_EGRESS_OUTCOMES),
    ),
    "egress_bytes": _Family(
        "ops_worker_egress_bytes",
        "bytes the egress proxies relayed, by direction (up: from the approach, down)",
        ("direction",),
        _each(_EGRESS_DIRECTIONS),
    ),
    "execution": _Family(
        "ops_worker_execution_duration_seconds",
        "seconds a run's execution took, by selection (profiled, legacy)",
        ("selection",),
        _each(SELECTIONS),
        buckets=_EXECUTION_BUCKETS,
    ),
    "close": _Family(
        "ops_worker_close_duration_seconds",
        "seconds a run's close took (enqueue and delivery), by path (outbox, direct)",
        ("path",),
        _each(CLOSE_RESULTS),
        buckets=_CLOSE_BUCKETS,
    ),
}


class WorkerMetrics:
    """One worker's metrics. Components take it as an argument; `open_worker` builds the
    one the endpoint serves, with the outbox gauges when it is given the store."""

    def __init__(self, store: OutboxStore | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        if store is not None:
            self.registry.register(OutboxCollector(store))
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        for key, family in _FAMILIES.items():
            metric: Counter | Histogram
            if family.buckets is None:
                metric = self._counters[key] = Counter(
                    family.name, family.documentation, family.labels, registry=self.registry
                )
            else:
                metric = self._histograms[key] = Histogram(
                    family.name,
                    family.documentation,
                    family.labels,
                    buckets=family.buckets,
                    registry=self.registry,
                )
            for values in family.series:
                metric.labels(*values)

    def claim(self, result: ClaimResult) -> None:
        self._counters["claims"].labels(result=result).inc()

    def turn_skipped(self, reason: SkipReason) -> None:
        self._counters["skipped"].labels(reason=reason).inc()

    def run_ended(self, outcome: RunOutcome) -> None:
        self._counters["runs"].labels(outcome=outcome).inc()

    def execution_failed(self, reason: FailureReason) -> None:
        self._counters["failures"].labels(reason=reason).inc()

    def replayed(self, report: ReplayReport) -> None:
        """One replay pass of the loop: each entry it handled, by what became of it."""
        for entry in report.outcomes:
            self._counters["replays"].labels(outcome=entry.outcome).inc()

    def changes_uploaded(self, result: str) -> None:
        """One changes upload (close_delivery.py); an unknown result counts as `other`."""
        known = result if result in UPLOAD_RESULTS else "other"
        self._counters["uploads"].labels(result=known).inc()

    def heartbeat(self, result: HeartbeatResult) -> None:
        self._counters["heartbeats"].labels(result=result).inc()

    def egress_connection(self, record: ConnectionRecord) -> None:
        """One connection to an egress proxy, when it ended (sandbox/egress_log.py)."""
        self._counters["egress"].labels(outcome=record.outcome).inc()
        self._counters["egress_bytes"].labels(direction="up").inc(record.bytes_up)
        self._counters["egress_bytes"].labels(direction="down").inc(record.bytes_down)

    def executed(self, selection: Selection, seconds: float) -> None:
        self._histograms["execution"].labels(selection=selection).observe(seconds)

    def closed(self, path: str, result: str, seconds: float) -> None:
        """One run's close. A result outside its path's list would be a new series per
        value; it is counted as `other` instead (and says a list here is behind)."""
        known = CLOSE_RESULTS.get(path)
        if known is None:
            return
        counted = result if result in known else "other"
        self._counters["closes"].labels(path=path, result=counted).inc()
        self._histograms["close"].labels(path=path).observe(seconds)


class OutboxCollector(Collector):
    def __init__(self, store: OutboxStore) -> None:
        self._store = store

    def collect(self) -> Iterable[Metric]:
        readable = GaugeMetricFamily(
            f"{_OUTBOX}_readable", "1 when the close outbox could be read at this scrape"
        )
        try:
            snapshot = self._store.snapshot()
        except (OSError, OutboxError) as exc:
            log.warning("metrics: the close outbox could not be read: %s", type(exc).__name__)
            readable.add_metric([], 0)
            yield readable
            return
        readable.add_metric([], 1)
        yield readable
        yield GaugeMetricFamily(
            f"{_OUTBOX}_pending",
            "close outbox entries waiting for delivery",
            value=len(snapshot.pending),
        )
        yield GaugeMetricFamily(
            f"{_OUTBOX}_oldest_pending_age_seconds",
            "seconds the oldest close outbox entry waiting for delivery has waited (0: none)",
            value=oldest_pending_age(snapshot),
        )
        quarantined = GaugeMetricFamily(
            f"{_OUTBOX}_quarantined",
            "quarantined close outbox material by reason (an operator must inspect it)",
            labels=["reason"],
        )
        reasons = Tally(entry.reason or "missing_reason" for entry in snapshot.quarantined)
        for reason, count in sorted(reasons.items()):
            quarantined.add_metric([reason], count)
        yield quarantined
        yield GaugeMetricFamily(
            f"{_OUTBOX}_delivered",
            "delivered close outbox records kept by retention",
            value=snapshot.delivered_count,
        )


def oldest_pending_age(snapshot: OutboxSnapshot) -> float:
    """Seconds from the oldest pending entry's creation to the snapshot; 0 when nothing is
    pending. An entry whose record cannot be read has no creation time and is left out
    (it is quarantined by the next replay pass)."""
    created = [entry.created_at for entry in snapshot.pending if entry.created_at is not None]
    if not created:
        return 0.0
    return max(0.0, (snapshot.taken_at - min(created)).total_seconds())


# A scrape connection silent for this long is closed. The server takes a thread per
# connection, and without a timeout one that never sends (or stops halfway) holds its
# thread for ever; Prometheus's own scrape timeout is 10 s by default.
SCRAPE_READ_SECONDS = 10.0


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None  # one line per scrape would bury the worker's own log


@contextmanager
def serve_metrics(
    registry: CollectorRegistry,
    host: str,
    port: int,
    *,
    read_timeout_seconds: float = SCRAPE_READ_SECONDS,
) -> Iterator[tuple[str, int]]:
    """Serve `registry` at `/metrics` on host:port until the block ends; yields the bound
    address. prometheus_client's server (a thread per connection), with a read timeout
    (SCRAPE_READ_SECONDS) that its start_http_server does not set."""

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Handler(_QuietHandler):
        timeout = read_timeout_seconds

    server = make_server(host, port, make_wsgi_app(registry), Server, handler_class=Handler)
    with served_in_a_thread(server, "metrics") as address:
        log.info("metrics on http://%s:%d/metrics", *address)
        yield address
