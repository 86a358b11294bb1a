"""The Glas gateway: a queued request in, a GatewayResult 1.0 out.

`HttpGlasGateway` asks a remote Glas; `LocalGlasGateway` runs the profile's approach
(`command` or `brief`) itself, in a fresh worktree, inside the repository grant.
"""

from rein_aharness.gateway.errors import (
    ApproachFailed,
    ApproachTimedOut,
    GatewayError,
    GatewayProtocolError,
    GatewayRefused,
    GatewayUnavailable,
    SandboxFailed,
    WorkRejected,
)
from rein_aharness.gateway.http import HttpGlasGateway
from rein_aharness.gateway.local import LocalGlasGateway
from rein_aharness.gateway.protocol import GlasGateway, WithdrawLanding
from rein_aharness.gateway.request import QueuedRequest, request_id_for, transaction_id_for

__all__ = [
    "ApproachFailed",
    "ApproachTimedOut",
    "GatewayError",
    "GatewayProtocolError",
    "GatewayRefused",
    "GatewayUnavailable",
    "GlasGateway",
    "HttpGlasGateway",
    "LocalGlasGateway",
    "QueuedRequest",
    "SandboxFailed",
    "WithdrawLanding",
    "WorkRejected",
    "request_id_for",
    "transaction_id_for",
]
