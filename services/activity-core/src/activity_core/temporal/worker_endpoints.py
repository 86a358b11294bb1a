"""The Temporal worker's two endpoints, read from the environment when the command starts:

    ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS  host:port of `GET /livez`, 200 while the
                                                    worker's event loop runs; unset: none
    ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_MAX_STALL_SECONDS
                                                    how long the loop may go without running
                                                    before /livez answers 503, 2..3600 (30)
    ACTIVITY_CORE_TEMPORAL_WORKER_METRICS_ADDRESS   ip:port where the Temporal SDK serves its
                                                    Prometheus metrics (`temporal_*`); an IP
                                                    literal, the SDK resolves no names;
                                                    unset: none

Only `activity-core temporal-worker` reads them, so they are not part of
ActivityCoreSettings, which every command loads; they are read the same way, at the start,
and a bad value is one line naming the variable (SettingsError, exit 2).
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from activity_core.settings import SettingsError

__all__ = [
    "LIVENESS_ADDRESS",
    "METRICS_ADDRESS",
    "TEMPORAL_SDK_METRICS",
    "TemporalWorkerEndpoints",
    "load_worker_endpoints",
    "metrics_runtime",
    "parse_bind_address",
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


def parse_bind_address(text: str) -> tuple[str, int]:
    """`host:port` (`[v6]:port` for an IPv6 literal) as (host, port); ValueError otherwise.
    Port 0 asks the kernel for a free one."""
    host, colon, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or any(ch.isspace() for ch in host):
        raise ValueError("must be host:port")
    if not port.isascii() or not port.isdigit() or int(port) > 65_535:
        raise ValueError("the port must be a number from 0 to 65535")
    return host, int(port)


class TemporalWorkerEndpoints(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    liveness_address: str | None = Field(default=None, alias=LIVENESS_ADDRESS)
    liveness_max_stall_seconds: float = Field(
        default=30.0,
        ge=2,
        le=3600,
        allow_inf_nan=False,
        alias="ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_MAX_STALL_SECONDS",
    )
    metrics_address: str | None = Field(default=None, alias=METRICS_ADDRESS)

    @field_validator("liveness_address", "metrics_address", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("liveness_address")
    @classmethod
    def _liveness(cls, value: str | None) -> str | None:
        if value is not None:
            parse_bind_address(value)
        return value

    @field_validator("metrics_address")
    @classmethod
    def _metrics(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, port = parse_bind_address(value)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError("the host must be an IP address (e.g. 0.0.0.0:9100)") from None
        if port == 0:
            raise ValueError("needs a fixed port, the one Prometheus scrapes")
        return value


def load_worker_endpoints() -> TemporalWorkerEndpoints:
    """Read the environment; SettingsError with one line naming the variable."""
    try:
        return TemporalWorkerEndpoints()
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get("loc") or ()
        name = str(loc[0]) if loc else "settings"
        field = TemporalWorkerEndpoints.model_fields.get(name)
        variable = field.alias if field is not None and field.alias else name
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise SettingsError(f"{variable}: {message}") from None


def metrics_runtime(endpoints: TemporalWorkerEndpoints) -> Runtime | None:
    """A Temporal runtime whose SDK metrics are served at the metrics address (bound now);
    None when none is set. SettingsError naming the variable when it cannot be bound."""
    if endpoints.metrics_address is None:
        return None
    try:
        return Runtime(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(bind_address=endpoints.metrics_address)
            )
        )
    except ValueError as exc:
        # the SDK's core says e.g. "Failed starting Prometheus exporter: Address already in use"
        raise SettingsError(
            f"{METRICS_ADDRESS}: cannot listen on {endpoints.metrics_address}: {exc}"
        ) from None
