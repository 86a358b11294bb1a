"""The Temporal worker's two endpoints, set in ActivityCoreSettings (read when the command
starts, a bad value one line naming the variable, exit 2):

    ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS  host:port of `GET /livez`, 200 while the
                                                    worker's event loop runs; unset: none
    ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_MAX_STALL_SECONDS
                                                    how long the loop may go without running
                                                    before /livez answers 503, 2..3600 (30)
    ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS   ip:port where the Temporal SDK serves its
                                                    Prometheus metrics (`temporal_*`); an IP
                                                    literal, the SDK resolves no names;
                                                    unset: none

Neither takes a credential (the SDK's exporter cannot check one): each listens on a port of
its own, which deploy/k8s/components/monitoring's network policy opens to Prometheus's
namespace only. Here: binding the SDK's endpoint, and the metric names it serves.
"""

from __future__ import annotations

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from activity_core.settings import ActivityCoreSettings, SettingsError

__all__ = [
    "LIVENESS_ADDRESS",
    "METRICS_ADDRESS",
    "TEMPORAL_SDK_METRICS",
    "metrics_runtime",
]

LIVENESS_ADDRESS = "ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS"
METRICS_ADDRESS = "ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS"

# The SDK metrics deploy/k8s/components/monitoring's dashboard and alerts use; each is on
# the endpoint from the worker's start (the temporal-worker probe test scrapes a real
# worker for every one). The SDK's defaults: counters without `_total`, latencies in ms.
TEMPORAL_SDK_METRICS = (
    "temporal_worker_start",
    "temporal_worker_task_slots_available",
    "temporal_worker_task_slots_used",
    "temporal_num_pollers",
    "temporal_long_request",
    "temporal_request",
    "temporal_request_latency",
)


def metrics_runtime(settings: ActivityCoreSettings) -> Runtime | None:
    """A Temporal runtime whose SDK metrics are served at the metrics address (bound now);
    None when none is set. SettingsError naming the variable when it cannot be bound."""
    address = settings.temporal_worker_metrics_address
    if address is None:
        return None
    try:
        return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))
    except ValueError as exc:
        # the SDK's core says e.g. "Failed starting Prometheus exporter: Address already in use"
        raise SettingsError(f"{METRICS_ADDRESS}: cannot listen on {address}: {exc}") from None
