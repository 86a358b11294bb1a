"""Connecting to Temporal: the address from settings (or the local dev server), the
namespace from settings, a bounded retry at start and one clear line when it fails."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from datetime import timedelta

from temporalio.client import Client
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from activity_core.settings import ActivityCoreSettings
from activity_core.temporal.dev_server import (
    DEFAULT_PORT,
    LOCAL_IP,
    DevServerError,
    ensure_dev_server,
)
from activity_core.temporal.errors import TemporalUnavailable

__all__ = [
    "TemporalClientProvider",
    "connect",
    "is_unreachable",
    "target_address",
    "temporal_client",
]

# An RPC answered with one of these means "the server is not there right now".
_UNREACHABLE_CODES = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}
)

# Calls made on behalf of an HTTP request give up quickly: a 503 now beats a hung request.
_REQUEST_RETRY = RetryConfig(max_elapsed_time_millis=3000, max_retries=3)


def target_address(settings: ActivityCoreSettings) -> str:
    """TEMPORAL_ADDRESS, else the local dev server's address."""
    return settings.temporal_address or f"{LOCAL_IP}:{DEFAULT_PORT}"


def is_unreachable(exc: BaseException) -> bool:
    """True for the errors that mean the Temporal server could not be reached."""
    if isinstance(exc, RPCError):
        return exc.status in _UNREACHABLE_CODES
    # the SDK's connect raises a bare RuntimeError("Failed client connect: ...")
    if isinstance(exc, RuntimeError):
        return "connect" in str(exc).lower()
    return isinstance(exc, OSError | TimeoutError)


async def connect(
    address: str,
    namespace: str,
    *,
    attempts: int = 5,
    delay: float = 0.25,
    retry_config: RetryConfig | None = None,
) -> Client:
    """Connect, retrying a bounded number of times (a server that is still starting);
    raises TemporalUnavailable with one line naming the address."""
    last: BaseException | None = None
    for attempt in range(1, attempts + 1):
        try:
            return await Client.connect(
                address,
                namespace=namespace,
                connect_timeout=timedelta(seconds=5),
                retry_config=retry_config,
            )
        except (RuntimeError, RPCError, OSError, TimeoutError) as exc:
            last = exc
            if attempt < attempts:
                await asyncio.sleep(delay * attempt)
    raise TemporalUnavailable(
        f"Temporal is not reachable at {address} (TEMPORAL_ADDRESS) after {attempts} attempts: "
        f"{_short(last)}"
    ) from last


def _short(exc: BaseException | None) -> str:
    text = " ".join(str(exc).split()) if exc is not None else "unknown error"
    return text[:200]


@contextlib.asynccontextmanager
async def temporal_client(settings: ActivityCoreSettings) -> AsyncIterator[Client]:
    """A client for a command: TEMPORAL_ADDRESS when set, else the local dev server under the
    state dir (started if nobody listens, stopped at the end if we started it)."""
    if settings.temporal_address:
        yield await connect(settings.temporal_address, settings.temporal_namespace)
        return
    try:
        server = await asyncio.to_thread(
            ensure_dev_server, settings.state_dir, namespace=settings.temporal_namespace
        )
    except DevServerError as exc:
        raise TemporalUnavailable(str(exc)) from exc
    print(f"activity-core: {server.describe()}", file=sys.stderr, flush=True)
    try:
        yield await connect(server.address, settings.temporal_namespace)
    finally:
        await asyncio.to_thread(server.stop)


class TemporalClientProvider:
    """The HTTP app's Temporal client: connected on first use, not at start, so the queue API
    starts (and keeps answering) while Temporal is down; a failed connect is retried on the
    next request."""

    def __init__(self, settings: ActivityCoreSettings) -> None:
        self._address = target_address(settings)
        self._namespace = settings.temporal_namespace
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    @property
    def address(self) -> str:
        return self._address

    async def get(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                self._client = await connect(
                    self._address, self._namespace, attempts=1, retry_config=_REQUEST_RETRY
                )
            return self._client
