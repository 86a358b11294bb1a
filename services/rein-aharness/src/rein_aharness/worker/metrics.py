"""The worker's optional Prometheus endpoint: `REIN_AHARNESS_METRICS_ADDRESS=host:port`.

Every gauge is read from the close outbox when scraped (one `snapshot`, under the store's
shared lock), so it says what `close-outbox status` says at that moment:

    rein_aharness_close_outbox_pending                    entries waiting for delivery
    rein_aharness_close_outbox_oldest_pending_age_seconds how long the oldest of them has
                                                          waited (0: none pending)
    rein_aharness_close_outbox_quarantined{reason="..."}  quarantined material by reason
                                                          (foreign_worker_identity,
                                                          conclusive_refusal, ...)
    rein_aharness_close_outbox_delivered                  delivered records kept
    rein_aharness_close_outbox_readable                   1; 0 when the outbox could not
                                                          be read (then the others are
                                                          absent)

Each worker pod has an outbox of its own, so across pods the counts add up (sum) and the
age is the largest one (max); deploy/README.md lists every metric with its aggregation.

prometheus_client's own HTTP server answers `/metrics` from a daemon thread; `run`
stops it when it ends. Unset: no endpoint, no thread.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rein_aharness.outbox import OutboxError, OutboxSnapshot, OutboxStore

__all__ = ["OutboxCollector", "oldest_pending_age", "serve_metrics"]

log = logging.getLogger(__name__)

_PREFIX = "rein_aharness_close_outbox"


class OutboxCollector(Collector):
    def __init__(self, store: OutboxStore) -> None:
        self._store = store

    def collect(self) -> Iterable[Metric]:
        readable = GaugeMetricFamily(
            f"{_PREFIX}_readable", "1 when the close outbox could be read at this scrape"
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
            f"{_PREFIX}_pending",
            "close outbox entries waiting for delivery",
            value=len(snapshot.pending),
        )
        yield GaugeMetricFamily(
            f"{_PREFIX}_oldest_pending_age_seconds",
            "seconds the oldest close outbox entry waiting for delivery has waited (0: none)",
            value=oldest_pending_age(snapshot),
        )
        quarantined = GaugeMetricFamily(
            f"{_PREFIX}_quarantined",
            "quarantined close outbox material by reason (an operator must inspect it)",
            labels=["reason"],
        )
        reasons = Counter(entry.reason or "missing_reason" for entry in snapshot.quarantined)
        for reason, count in sorted(reasons.items()):
            quarantined.add_metric([reason], count)
        yield quarantined
        yield GaugeMetricFamily(
            f"{_PREFIX}_delivered",
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


@contextmanager
def serve_metrics(store: OutboxStore, host: str, port: int) -> Iterator[tuple[str, int]]:
    """Serve `/metrics` on host:port until the block ends; yields the bound address."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OutboxCollector(store))
    server, thread = start_http_server(port, addr=host, registry=registry)
    bound = server.server_address
    address = (str(bound[0]), int(bound[1]))
    log.info("metrics on http://%s:%d/metrics", *address)
    try:
        yield address
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
