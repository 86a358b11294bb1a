"""Prometheus metrics of the queue, in a registry owned by one app instance.

Under `serve --workers N` prometheus_client runs in multiprocess mode (the supervisor sets
PROMETHEUS_MULTIPROC_DIR before any worker starts): each worker writes its samples to
files there and the exposition sums every worker's, so a scrape answered by any worker
reports the whole API. The by-state gauge is read from the database at scrape time, so
the most recent reading is the one reported; so is the oldest-run gauge, which each
process refreshes every few seconds (queue/run_ages.py).

Across replicas (deploy/README.md, "Metrics" lists each): counters and histograms are per
process, so a dashboard sums them; the gauges read from the database (`ops_runs`,
`ops_runs_oldest_age_seconds`, `ops_runs_dead_rows`) say the same on every replica, so it
takes their max, never their sum.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

__all__ = ["QueueMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# How a stale lease ends (claim.py, record_ended_leases): the run is open again for its next
# attempt, or it had no attempt left.
LEASE_OUTCOMES = ("reopened", "expired")
# An API answer: a millisecond for a claim or close, up to 20 s for a long-poll claim.
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0)


class QueueMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.runs_by_state = Gauge(
            "ops_runs",
            "ops runs by state (read at scrape time)",
            ["state"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.claimed = Counter(
            "ops_runs_claimed", "runs handed out by claims", registry=self.registry
        )
        self.claims_waiting_without_statement = Counter(
            "ops_run_long_polls_without_statement",
            "long-poll claims that waited without a statement of their own: one of their key"
            " had just found nothing open and nothing they may match opened since",
            registry=self.registry,
        )
        self.closes = Counter(
            "ops_run_closes",
            "accepted closes by action and disposition",
            ["action", "disposition"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "ops_run_refusals",
            "refused queue requests by code",
            ["code"],
            registry=self.registry,
        )
        self.claim_latency = Histogram(
            "ops_run_claim_seconds",
            "claim transaction latency",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.close_latency = Histogram(
            "ops_run_close_seconds",
            "close transaction latency",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.coalesced = Histogram(
            "ops_run_requests_per_statement",
            "claims or common closes served by one statement (concurrent ones are coalesced;"
            " statement=dispatch: long-poll waiters served by one dispatch pass's claim)",
            ["statement"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 100),
            registry=self.registry,
        )
        self.leases_ended = Counter(
            "ops_run_leases_ended",
            "stale leases ended, by outcome (reopened or expired)",
            ["outcome"],
            registry=self.registry,
        )
        # The children the claim and close path touch on every request, looked up once:
        # `labels()` costs more than the observation itself.
        self.coalesced_claims = self.coalesced.labels(statement="claim")
        self.coalesced_closes = self.coalesced.labels(statement="close")
        self.dispatched_claims = self.coalesced.labels(statement="dispatch")
        self._closes_by_kind: dict[tuple[str, str], Any] = {}
        # Exported at 0 from the start: a series that first appears at 1 has no earlier
        # sample, and rate()/increase() would miss that first expiry.
        for outcome in LEASE_OUTCOMES:
            self.leases_ended.labels(outcome=outcome)
        self.oldest_unfinished = Gauge(
            "ops_runs_oldest_age_seconds",
            "seconds since the oldest run in each unfinished state (open, claimed) was "
            "created; 0 when there is none (refreshed every few seconds)",
            ["state"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.http_requests = Counter(
            "ops_http_requests",
            "HTTP requests answered, by method, route template and status code",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_request_seconds = Histogram(
            "ops_http_request_duration_seconds",
            "time from a request's arrival to the end of its answer, by method and route "
            "template (a long-poll claim waits up to its own timeout)",
            ["method", "route"],
            buckets=HTTP_BUCKETS,
            registry=self.registry,
        )
        # The process (CPU, memory, open files) and the runtime (GC, Python version) on
        # the same endpoint; under `serve --workers N` they are those of the worker process
        # that answered the scrape (exposition).
        _runtime_collectors(self.registry)

        self.dead_rows = Gauge(
            "ops_runs_dead_rows",
            "dead row versions in ops_runs at the last look (pg_stat_user_tables)",
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.vacuums = Counter(
            "ops_runs_vacuums",
            "VACUUMs of ops_runs this service ran, by outcome (vacuumed, held, busy)",
            ["outcome"],
            registry=self.registry,
        )

        self.changes_uploads = Counter(
            "ops_run_changes_uploads",
            "accepted uploads of a run's changes bundle, by outcome (stored, repeated)",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in ("stored", "repeated"):
            self.changes_uploads.labels(outcome=outcome)
        self.changes_expired = Counter(
            "ops_run_changes_expired",
            "stored changes bundles deleted past ACTIVITY_CORE_CHANGES_RETENTION_DAYS",
            registry=self.registry,
        )

    def count_close(self, action: str, disposition: str) -> None:
        counter = self._closes_by_kind.get((action, disposition))
        if counter is None:
            counter = self.closes.labels(action=action, disposition=disposition)
            self._closes_by_kind[(action, disposition)] = counter
        counter.inc()

    def exposition(self) -> bytes:
        """The text exposition: this app's registry, or every worker's under multiprocess."""
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            return generate_latest(self.registry)
        combined = CollectorRegistry()
        MultiProcessCollector(combined, path=directory)  # type: ignore[no-untyped-call]
        _runtime_collectors(combined)
        return generate_latest(combined)


def _runtime_collectors(registry: CollectorRegistry) -> None:
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
