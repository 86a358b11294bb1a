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
    RemoteRepositoryNotFound,
    RepositoryCredentialsRefused,
    RepositoryTooLarge,
    RepositoryUnavailable,
    SandboxFailed,
    SecretUnavailable,
    WorkRejected,
)
from rein_aharness.gateway.fetch_failures import fetch_error
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
    "RemoteRepositoryNotFound",
    "RepositoryCredentialsRefused",
    "RepositoryTooLarge",
    "RepositoryUnavailable",
    "SandboxFailed",
    "SecretUnavailable",
    "WithdrawLanding",
    "WorkRejected",
    "fetch_error",
    "request_id_for",
    "transaction_id_for",
]
