"""What is still alive when the interpreter exits: every started process registers here,
and an `atexit` hook stops and cleans up whatever a caller forgot (a test that failed
before its `with Supervisor(...)` ended, say)."""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol

__all__ = ["LIVE", "Stoppable"]


class Stoppable(Protocol):
    def stop(self, timeout: float) -> object: ...

    def cleanup(self) -> object: ...


class _Registry:
    def __init__(self) -> None:
        self._items: dict[int, Stoppable] = {}
        self._lock = threading.Lock()

    def add(self, process: Stoppable) -> None:
        with self._lock:
            self._items[id(process)] = process

    def discard(self, process: Stoppable) -> None:
        with self._lock:
            self._items.pop(id(process), None)

    def __iter__(self) -> Iterator[Stoppable]:
        with self._lock:
            return iter(list(self._items.values()))


LIVE = _Registry()


@atexit.register
def _stop_leftovers() -> None:
    for process in LIVE:
        with contextlib.suppress(Exception):
            process.stop(timeout=5.0)
            process.cleanup()
