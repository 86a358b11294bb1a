"""The queue's upkeep tasks (vacuum.py, run_ages.py, changes_retention.py): one asyncio
task each per app instance, started in the lifespan and cancelled at its end, and the
loop of those that look again at a fixed interval.

An upkeep task never ends the API: a database outage is logged at debug (the queue's own
requests report it) and any other fault with its traceback, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from activity_core.db.errors import DATABASE_FAILURES

__all__ = ["BackgroundTask", "repeat"]


class BackgroundTask:
    """`start()` runs `body()` as a task named `name` (once); `stop()` cancels and awaits it."""

    def __init__(self, name: str, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._name = name
        self._body = body
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._body(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


async def repeat(
    step: Callable[[], Awaitable[object]], *, every: float, failed: str, log: logging.Logger
) -> None:
    """`step()` now and every `every` seconds after, for ever; `failed` is the log line of
    a step that raised."""
    while True:
        try:
            await step()
        except DATABASE_FAILURES as exc:
            log.debug("%s: %s", failed, type(exc).__name__)
        except Exception:
            log.exception(failed)
        await asyncio.sleep(every)
