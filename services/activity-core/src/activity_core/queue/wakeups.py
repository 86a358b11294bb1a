"""Wake long-poll claimers when a run becomes open: LISTEN/NOTIFY, never a busy loop.

One dedicated connection per app instance LISTENs on `ops_runs_open` (a row trigger
notifies whenever a row becomes open; since migration 0013 the payload is that row's
labels, and identical notifications of one transaction fold into one). Every notification
calls the subscribers with the labels: the claim dispatcher (queue/dispatch.py) runs one
claim pass for the keys of the process's waiters that may match. When the listener
connection is lost, the subscribers are called with None (anything may have opened while
nobody listened) and the listener reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from activity_core.db.errors import DATABASE_FAILURES

__all__ = ["LISTENER_APPLICATION_NAME", "OpenRunSignal", "opened_labels"]

log = logging.getLogger("activity_core.wakeups")

CHANNEL = "ops_runs_open"
LISTENER_APPLICATION_NAME = "activity-core-listener"


def _set_when_called(event: asyncio.Event) -> Any:
    def callback(*_: Any) -> None:
        event.set()

    return callback


def opened_labels(payload: str) -> frozenset[str] | None:
    """The labels a notification names (migration 0013: the opened row's labels as JSON),
    or None for "anything may have opened": an empty payload (labels too long for a
    notification, an older trigger) or one that is not a JSON list of strings."""
    if not payload:
        return None
    try:
        labels = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        return None
    return frozenset(labels)


class OpenRunSignal:
    def __init__(
        self, dsn: str, *, reconnect_delay: float = 1.0, first_listen_timeout: float = 5.0
    ) -> None:
        self._dsn = dsn
        self._reconnect_delay = reconnect_delay
        self._first_listen_timeout = first_listen_timeout
        self._task: asyncio.Task[None] | None = None
        self._first_attempt_done = asyncio.Event()
        self._draining = False
        self._listening = False
        self._subscribers: list[Callable[[frozenset[str] | None], None]] = []

    def subscribe(self, callback: Callable[[frozenset[str] | None], None]) -> None:
        """Call `callback` on every wake-up with the opened run's labels, or None when
        anything may have opened (queue/dispatch.py runs one claim pass)."""
        self._subscribers.append(callback)

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up now: only then does every run that opens
        reach the subscribers (a lost connection ends with a wake-up of None)."""
        return self._listening

    def drain(self) -> None:
        """Shutdown began: end every long-poll wait now (they answer an empty claim)."""
        self._draining = True
        self.wake_all()

    def wake_all(self, labels: frozenset[str] | None = None) -> None:
        for callback in self._subscribers:
            callback(labels)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ops-runs-listener")
        # Give the first LISTEN a moment so early claimers are covered; never block start-up,
        # and stop waiting once the first attempt has failed (the database is down: the
        # process should answer /healthz now, not after the timeout).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_attempt_done.wait(), self._first_listen_timeout)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.wake_all()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        self.wake_all(opened_labels(payload if isinstance(payload, str) else ""))

    async def _run(self) -> None:
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(
                    self._dsn, server_settings={"application_name": LISTENER_APPLICATION_NAME}
                )
                lost = asyncio.Event()
                conn.add_termination_listener(_set_when_called(lost))
                await conn.add_listener(CHANNEL, self._on_notify)
                self._listening = True
                self._first_attempt_done.set()
                # Anything opened while we were not listening: let waiters look again.
                self.wake_all()
                await lost.wait()
                self._listening = False
                log.warning("listener connection lost; reconnecting")
            except asyncio.CancelledError:
                self._listening = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), 2)
                raise
            except DATABASE_FAILURES as exc:
                log.warning("listener cannot connect: %s", type(exc).__name__)
            self._listening = False
            self._first_attempt_done.set()
            self.wake_all()
            await asyncio.sleep(self._reconnect_delay)
