"""The bounded, jittered retry used for every request to a peer.

By default only `QueueTransientError` (transport failure, 5xx) is retried; other peers
pass their own transient error types. A conclusive refusal, an auth failure or an
unclassified rejection is raised at once: repeating the request cannot change the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from rein_aharness.adapters.queue_errors import QueueTransientError

__all__ = ["RetryPolicy", "with_retries"]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all; waits drawn from [0, min(max_wait, initial * 2**n)]."""

    attempts: int = 4
    initial_wait: float = 0.5
    max_wait: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.initial_wait < 0 or self.max_wait < 0:
            raise ValueError("waits must not be negative")


async def with_retries(
    policy: RetryPolicy,
    call: Callable[[], Awaitable[T]],
    *,
    retry_on: tuple[type[BaseException], ...] = (QueueTransientError,),
) -> T:
    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait),
        retry=retry_if_exception_type(retry_on),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity either returns or reraises")
