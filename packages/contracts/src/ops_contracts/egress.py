"""``network_egress`` of the execution evidence, as the worker produces it.

The consumer side (``ops_evidence.egress``) keeps the same keys and closed sets,
tolerantly and within a byte bound; these models are strict, so the worker never sends
what the queue would drop.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EgressDestination", "EgressOutcome", "EgressReason", "NetworkEgress"]

EgressOutcome = Literal["allowed", "refused", "failed"]
EgressReason = Literal[
    "not_listed",
    "forbidden_address",
    "unresolvable",
    "bad_request",
    "too_many_connections",
    "connect_failed",
    "connect_timeout",
]

_PRODUCER_CONFIG = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)
_MAX_INT = 2**53 - 1


class EgressDestination(BaseModel):
    """One (host, port, outcome, reason) and what its connections moved."""

    model_config = _PRODUCER_CONFIG

    host: str | None = Field(default=None, pattern=r"^[a-z0-9.:-]{1,253}$")
    port: int | None = Field(default=None, ge=1, le=65535)
    outcome: EgressOutcome
    reason: EgressReason | None = None
    connections: int = Field(ge=0, le=_MAX_INT)
    bytes_up: int = Field(ge=0, le=_MAX_INT)
    bytes_down: int = Field(ge=0, le=_MAX_INT)


class NetworkEgress(BaseModel):
    """``open``: the host's network, nothing counted; ``allowlist``: the egress proxy's
    counts of every connection, and its destinations as far as they fit."""

    model_config = _PRODUCER_CONFIG

    mode: Literal["open", "allowlist"]
    allowed: int | None = Field(default=None, ge=0, le=_MAX_INT)
    refused: int | None = Field(default=None, ge=0, le=_MAX_INT)
    failed: int | None = Field(default=None, ge=0, le=_MAX_INT)
    bytes_up: int | None = Field(default=None, ge=0, le=_MAX_INT)
    bytes_down: int | None = Field(default=None, ge=0, le=_MAX_INT)
    destinations: list[EgressDestination] | None = Field(default=None, max_length=16)
