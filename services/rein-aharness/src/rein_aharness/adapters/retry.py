"""The bounded, jittered retry used for every request to a peer.

By default only `QueueTransientError` (transport failure, 5xx) is retried; other peers
pass their own transient error types. A conclusive refusal, an auth failure or an
unclassified rejection is raised at once: repeating the request cannot change the answer.

`on_retry`, when given, hears of each failed attempt that is about to be retried (its
number, from 1, and what it raised), so a caller can say so: a retry that succeeds is
otherwise silent, and an outage it rode out leaves no trace.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
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
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        if on_retry is not None and error is not None:
            on_retry(state.attempt_number, error)

    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait),
        retry=retry_if_exception_type(retry_on),
        before_sleep=before_sleep,
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity either returns or reraises")
