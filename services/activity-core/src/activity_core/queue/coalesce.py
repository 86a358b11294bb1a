"""Concurrent requests with the same key share one call: batching that only load creates.

A claim is a statement on a shared index head. Under load, 32 workers' claims arrive
together, and as 32 separate statements they cost the database 32 executions, commits and
index descents, and they skip each other's locked rows. A `Coalescer` lets every request
that arrives while a call for its key is running wait for the next call, which then
serves all of them at once. Nothing waits for company: an idle key calls at once, so a
lone request pays one task switch and no delay, and batches grow only as fast as requests
pile up (the "smart batching" of group commit).

The call runs in a task of its own, so a caller that is cancelled (its client went away)
never cancels a call that serves others; an item whose caller is gone before its call
starts is dropped from it. The call answers one result per item, in order; if it raises,
every item of that call gets the exception.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Lane(Generic[T, R]):
    waiting: deque[tuple[T, asyncio.Future[R]]] = field(default_factory=deque)
    running: int = 0


class Coalescer(Generic[K, T, R]):
    def __init__(
        self,
        call: Callable[[K, list[T]], Awaitable[list[R]]],
        *,
        max_items: Callable[[K], int],
        max_running: int = 1,
    ) -> None:
        """`call(key, items)` answers one result per item; `max_items(key)` bounds a call
        (1 turns coalescing off for that key: each request calls at once, in its own task,
        as if there were no coalescer); up to `max_running` calls per key overlap."""
        if max_running < 1:
            raise ValueError("max_running must be at least 1")
        self._call = call
        self._max_items = max_items
        self._max_running = max_running
        self._lanes: dict[K, _Lane[T, R]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def keys_in_use(self) -> int:
        """Keys with a call running or items waiting (an idle key keeps nothing)."""
        return len(self._lanes)

    async def submit(self, key: K, item: T) -> R:
        if self._max_items(key) <= 1:
            # coalescing is off for this key: call at once, in the caller's own task
            results = await self._call(key, [item])
            if len(results) != 1:
                raise RuntimeError(f"call answered {len(results)} results for 1 item")
            return results[0]
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        lane.waiting.append((item, future))
        if lane.running < self._max_running:
            lane.running += 1
            task = asyncio.create_task(self._serve(key, lane))
            # the loop keeps only weak references to tasks
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _serve(self, key: K, lane: _Lane[T, R]) -> None:
        try:
            while lane.waiting:
                batch = self._take(lane, self._max_items(key))
                if batch:
                    await self._run(key, batch)
        finally:
            lane.running -= 1
            if lane.running == 0 and not lane.waiting and self._lanes.get(key) is lane:
                del self._lanes[key]

    @staticmethod
    def _take(lane: _Lane[T, R], limit: int) -> list[tuple[T, asyncio.Future[R]]]:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        while lane.waiting and len(batch) < limit:
            item, future = lane.waiting.popleft()
            if not future.done():  # a cancelled caller's item is dropped before its call
                batch.append((item, future))
        return batch

    async def _run(self, key: K, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._call(key, [item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"coalesced call answered {len(results)} of {len(batch)}")
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
