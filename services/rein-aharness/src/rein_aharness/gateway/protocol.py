"""The one interface the worker executes through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from ops_contracts import GatewayResult
from rein_aharness.gateway.request import QueuedRequest

__all__ = ["GlasGateway", "WithdrawLanding"]

# Remove the landing branch `rein/<run-id>/<attempt>` of (target_repo, run_id, attempt)
# if it landed: its run will not be closed as succeeded (a lost lease, a cancelled run).
# Never raises; the local gateway has one (LocalGlasGateway.withdraw), a remote one none.
WithdrawLanding = Callable[[str, str, int], Awaitable[None]]


class GlasGateway(Protocol):
    """Execute one queued request and answer with a GatewayResult 1.0.

    A result (ok or not) means the request was executed and its evidence is final. A
    `GatewayError` (gateway/errors.py) means the run is to be failed with its reason,
    reopen decision and optional evidence. Cancellation abandons the request: the
    implementation cleans up and closes nothing.
    """

    async def execute(self, request: QueuedRequest) -> GatewayResult: ...
