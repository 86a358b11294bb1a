"""The one interface the worker executes through."""

from __future__ import annotations

from typing import Protocol

from ops_contracts import GatewayResult
from rein_aharness.gateway.request import QueuedRequest

__all__ = ["GlasGateway"]


class GlasGateway(Protocol):
    """Execute one queued request and answer with a GatewayResult 1.0.

    A result (ok or not) means the request was executed and its evidence is final. A
    `GatewayError` (gateway/errors.py) means the run is to be failed with its reason,
    reopen decision and optional evidence. Cancellation abandons the request: the
    implementation cleans up and closes nothing.
    """

    async def execute(self, request: QueuedRequest) -> GatewayResult: ...
