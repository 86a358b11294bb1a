"""Wake long-poll claimers when a run becomes open: LISTEN/NOTIFY, never a busy loop.

One dedicated connection per app instance LISTENs on `ops_runs_open` (a statement trigger
notifies whenever a statement leaves a row open). Every notification completes the current
`WakeToken` and starts a new one, and calls the subscribers: the claim dispatcher
(queue/dispatch.py) runs one claim pass for all of the process's waiters. When the listener
connection is lost, waiters are woken too (they re-check) and the listener reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from activity_core.db.errors import DATABASE_FAILURES

__all__ = ["LISTENER_APPLICATION_NAME", "OpenRunSignal"]

log = logging.getLogger("activity_core.wakeups")

CHANNEL = "ops_runs_open"
LISTENER_APPLICATION_NAME = "activity-core-listener"


def _set_when_called(event: asyncio.Event) -> Any:
    def callback(*_: Any) -> None:
        event.set()

    return callback


class WakeToken:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> bool:
        """True when woken, False when the timeout passed first."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        return True


class OpenRunSignal:
    def __init__(
        self, dsn: str, *, reconnect_delay: float = 1.0, first_listen_timeout: float = 5.0
    ) -> None:
        self._dsn = dsn
        self._reconnect_delay = reconnect_delay
        self._first_listen_timeout = first_listen_timeout
        self._token = WakeToken()
        self._task: asyncio.Task[None] | None = None
        self._first_attempt_done = asyncio.Event()
        self._draining = False
        self._subscribers: list[Callable[[], None]] = []

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call `callback` on every wake-up (queue/dispatch.py runs one claim pass)."""
        self._subscribers.append(callback)

    def token(self) -> WakeToken:
        return self._token

    @property
    def draining(self) -> bool:
        return self._draining

    def drain(self) -> None:
        """Shutdown began: end every long-poll wait now (they answer an empty claim)."""
        self._draining = True
        self.wake_all()

    def wake_all(self) -> None:
        token, self._token = self._token, WakeToken()
        token.fire()
        for callback in self._subscribers:
            callback()

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

    def _on_notify(self, *_: Any) -> None:
        self.wake_all()

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
                self._first_attempt_done.set()
                # Anything opened while we were not listening: let waiters look again.
                self.wake_all()
                await lost.wait()
                log.warning("listener connection lost; reconnecting")
            except asyncio.CancelledError:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), 2)
                raise
            except DATABASE_FAILURES as exc:
                log.warning("listener cannot connect: %s", type(exc).__name__)
            self._first_attempt_done.set()
            self.wake_all()
            await asyncio.sleep(self._reconnect_delay)
