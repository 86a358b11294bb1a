"""One call with a watcher beside it, the first to finish ending the other.

The loop stops a long-poll or a replay when a stop is requested, and `run` listens for
signals while the worker runs: both are "await this, unless that comes first". The call
runs in the caller's task; its exception propagates as itself, not wrapped in the task
group's ExceptionGroup, so callers catch the worker's own errors as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ["run_watched"]

T = TypeVar("T")


async def run_watched(
    call: Callable[[], Awaitable[T]], watch: Callable[[], Awaitable[object]]
) -> T | None:
    """`call()`, cancelled if `watch()` returns first (then None); `watch` is cancelled
    once the call returns or raises."""
    outcome: list[T] = []
    failure: list[Exception] = []
    async with anyio.create_task_group() as tasks:

        async def watching() -> None:
            await watch()
            tasks.cancel_scope.cancel()

        tasks.start_soon(watching)
        try:
            outcome.append(await call())
        except Exception as exc:
            failure.append(exc)
        finally:
            tasks.cancel_scope.cancel()
    if failure:
        raise failure[0]
    return outcome[0] if outcome else None
