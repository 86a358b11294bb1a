"""One claim per wake-up for the whole process, not one per waiting worker.

Before this module every NOTIFY woke every long-poll waiter of the process and each ran its
own claim: about two transactions per idle worker per opened run (issue 34). Now a waiter
that found nothing registers here (its claim key, arrival order, a future) and waits on
that future only. A wake-up names the labels of the run that opened (the NOTIFY payload,
migration 0013) or nothing (the listener reconnected, a payload it cannot read): one
dispatch pass then claims on the waiters' behalf, for the keys such a run may match only.
Per claim key, one statement (queries.DISPATCH_CLAIM) hands the runs in claim order to the
oldest waiters of that key, in arrival order; keys are served oldest waiter first, so a
run two keys could take goes to the longest waiter. Waiters that got nothing keep waiting
without touching the database.

The bound, per opened run: one leasing statement per API process that has a waiting key
the run may match (one per such key). The process that wins the run leases it; any other
finds it locked or gone (SKIP LOCKED: an index probe) and, as its statement says no stale
claim held it back, does nothing more. So with R replicas and one key per fleet, at most R
claim transactions besides the emission's own. A stale claim costs one RECLAIM_STALE more,
in the pass whose statement it held back.

An idle fleet's return to the long poll costs nothing either, most of the time. A statement
that found nothing open for a key, while the listener was up, is noted with the wake-up
generation it was sent at. A claim of that key that arrives within EMPTY_TRUSTED_SECONDS,
with no wake-up since that its runs may match, no pass due and no failed pass waiting,
registers without a statement of its own: it would have found what the waiters of that
key found, nothing, and the dispatcher hands it whatever opens from now on exactly as it
would had it waited all along. The trust is short on purpose: a run can also become
claimable without a NOTIFY (a lease that goes stale, a row a rolled-back transaction held
while a statement skipped it), and the first claim after the trust ran out looks again,
so at most one statement per key per EMPTY_TRUSTED_SECONDS finds those, as before.

No lost wake-up: a waiter notes the pass generation before its own first claim; when it
registers after a wake-up that happened in between, it schedules a pass for its key. A
waiter whose request is cancelled after a pass leased runs for it gives them back at once
(queries.RELEASE_UNDELIVERED reopens them with their attempt restored), which notifies
again, so the next waiter, in this process or another, gets them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from activity_core.queue.claim_types import Claimer, ClaimKey

__all__ = ["Dispatcher", "Waiter", "may_match"]

log = logging.getLogger("activity_core.dispatch")

# After a pass failed (the database away), the next one for the waiters still waiting.
PASS_RETRY_SECONDS = 1.0

# How long a statement's "nothing open for this key" spares a new claim of the key its own
# statement (module docstring). Also the longest a run that opened without a NOTIFY (a
# stale lease) may wait for a claim that looks, beyond what the fleet's polling gives.
EMPTY_TRUSTED_SECONDS = 5.0
# The wake-ups remembered to check that trust against; a busier queue than this many
# wake-ups per EMPTY_TRUSTED_SECONDS simply looks every time.
WAKE_LOG_LENGTH = 256

# the rows of each claimer, and whether a stale claim held the statement back
LeaseForWaiters = Callable[
    [ClaimKey, list[Claimer]], Awaitable[tuple[list[list[asyncpg.Record]], bool]]
]
Reclaim = Callable[[], Awaitable[int]]
Release = Callable[[str, list[asyncpg.Record]], Coroutine[Any, Any, None]]


def may_match(key: ClaimKey, labels: frozenset[str]) -> bool:
    """Whether a run with `labels` can be claimed under `key` (the claim statement's own
    label test: 'any' shares a label, 'all' has every one of them)."""
    if key.labels_mode == "any":
        return not labels.isdisjoint(key.labels)
    if key.labels_mode == "all":
        return labels.issuperset(key.labels)
    return True


@dataclass(frozen=True)
class _FoundEmpty:
    generation: int  # the wake-ups seen when the statement was sent
    at: float  # and when (the loop's clock)


@dataclass(eq=False)
class Waiter:
    key: ClaimKey
    claimer: Claimer
    order: int
    future: asyncio.Future[list[asyncpg.Record]] = field(repr=False)


class Dispatcher:
    def __init__(
        self,
        *,
        lease_for_waiters: LeaseForWaiters,
        reclaim: Reclaim,
        release: Release,
        claimers_per_statement: Callable[[ClaimKey], int],
        listening: Callable[[], bool] = lambda: False,
    ) -> None:
        self._lease_for_waiters = lease_for_waiters
        self._reclaim = reclaim
        self._release = release
        self._per_statement = claimers_per_statement
        # dicts keep insertion order: each key's waiters are in arrival order
        self._waiters: dict[ClaimKey, dict[int, Waiter]] = {}
        self._arrivals = itertools.count()
        self._generation = 0
        # what the next pass looks at: every key, or only these
        self._due_all = False
        self._due: set[ClaimKey] = set()
        self._pass: asyncio.Task[None] | None = None
        self._closed = False
        self._releases: set[asyncio.Task[None]] = set()
        self._retry: asyncio.TimerHandle | None = None
        self._listening = listening
        self._found_empty: dict[ClaimKey, _FoundEmpty] = {}
        # (generation, labels) of the latest wake-ups, oldest first
        self._wakes: deque[tuple[int, frozenset[str] | None]] = deque(maxlen=WAKE_LOG_LENGTH)

    @property
    def generation(self) -> int:
        """Wake-ups seen so far; a waiter notes it before its own first claim."""
        return self._generation

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def wake(self, labels: frozenset[str] | None = None) -> None:
        """A run with `labels` opened (a NOTIFY), or anything may have (None: the listener
        reconnected): one pass, for the keys that may match it."""
        self._generation += 1
        self._wakes.append((self._generation, labels))
        if labels is None:
            self._schedule(None)
        else:
            self._schedule(key for key in self._waiters if may_match(key, labels))

    def found_empty(self, key: ClaimKey, *, seen: int, at: float) -> None:
        """A statement sent at `at`, with `seen` wake-ups seen, found nothing open for `key`
        (and no stale claim held it back). One sent while the listener was down is
        outdated by the reconnect's wake-up (None), like any look before a wake-up."""
        known = self._found_empty.get(key)
        if known is None or known.at < at:
            if len(self._found_empty) >= 4 * WAKE_LOG_LENGTH:
                self._forget_untrusted(at)
            self._found_empty[key] = _FoundEmpty(seen, at)

    def knows_nothing_open(self, key: ClaimKey) -> bool:
        """Whether a new claim of `key` may wait without a statement of its own (module
        docstring): nothing was open for it a moment ago and nothing it may match opened
        since, as far as a listener that stayed up can tell."""
        known = self._found_empty.get(key)
        if (
            known is None
            or self._closed
            or self._retry is not None
            or self._due_all
            or key in self._due
            or not self._listening()
            or asyncio.get_running_loop().time() - known.at > EMPTY_TRUSTED_SECONDS
        ):
            return False
        if known.generation == self._generation:
            return True
        if not self._wakes or self._wakes[0][0] > known.generation + 1:
            return False  # the log no longer reaches back to that statement
        for generation, labels in reversed(self._wakes):
            if generation <= known.generation:
                break
            if labels is None or may_match(key, labels):
                return False
        return True

    def _forget_untrusted(self, now: float) -> None:
        for key, known in list(self._found_empty.items()):
            if now - known.at > EMPTY_TRUSTED_SECONDS:
                del self._found_empty[key]

    def register(self, key: ClaimKey, claimer: Claimer, *, seen: int) -> Waiter:
        future: asyncio.Future[list[asyncpg.Record]] = asyncio.get_running_loop().create_future()
        waiter = Waiter(key, claimer, next(self._arrivals), future)
        if self._closed:
            future.set_result([])
            return waiter
        self._waiters.setdefault(key, {})[waiter.order] = waiter
        if seen != self._generation:
            # a wake-up came between the waiter's own claim and now: look again for it
            self._schedule([key])
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        lane = self._waiters.get(waiter.key)
        if lane is not None:
            lane.pop(waiter.order, None)
            if not lane:
                del self._waiters[waiter.key]

    async def abandon(self, waiter: Waiter) -> None:
        """The waiter's request is gone (cancelled): give back whatever a pass leased it."""
        self.unregister(waiter)
        if waiter.future.done() and not waiter.future.cancelled():
            rows = waiter.future.result()
            if rows:
                await self._release(waiter.claimer.worker_id, rows)
        else:
            waiter.future.cancel()

    def close(self) -> None:
        """Shutdown: every waiter answers empty now, and new ones do not wait."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        for lane in self._waiters.values():
            for waiter in lane.values():
                if not waiter.future.done():
                    waiter.future.set_result([])
        self._waiters.clear()

    async def stop(self) -> None:
        self.close()
        if self._pass is not None:
            self._pass.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pass

    def _schedule(self, keys: Iterable[ClaimKey] | None) -> None:
        """Let the next pass look at `keys` (None: every key)."""
        if keys is None:
            if self._waiters:
                self._due_all = True
        else:
            self._due.update(keys)
        if not (self._due_all or self._due):
            return
        if self._pass is None or self._pass.done():
            self._pass = asyncio.create_task(self._passes(), name="ops-claim-dispatch")

    async def _passes(self) -> None:
        while (self._due_all or self._due) and not self._closed:
            due = None if self._due_all else self._due
            self._due_all, self._due = False, set()
            try:
                await self._one_pass(due)
            except asyncio.CancelledError:
                raise
            except Exception:
                # the waiters keep waiting and the pass is tried again shortly (a run that
                # opened meanwhile sent its one NOTIFY already); their deadline ends them
                log.exception("claim dispatch pass failed")
                self._retry_later()

    def _retry_later(self) -> None:
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(PASS_RETRY_SECONDS, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        if not self._closed:
            self._schedule(None)

    async def _one_pass(self, due: set[ClaimKey] | None) -> None:
        keys = [key for key in self._waiters if due is None or key in due]
        keys.sort(key=lambda k: next(iter(self._waiters[k])))
        reclaimed = False
        for key in keys:
            while True:
                batch = self._oldest(key)
                if not batch:
                    break
                seen, sent_at = self._generation, asyncio.get_running_loop().time()
                leased, held_back = await self._lease_for_waiters(key, [w.claimer for w in batch])
                self._hand_out(batch, leased)
                short = sum(map(len, leased)) < key.limit * len(batch)
                if short and not held_back:
                    self.found_empty(key, seen=seen, at=sent_at)
                if held_back and not reclaimed:
                    # a stale claim held the statement back: reopen (that notifies again)
                    reclaimed = True
                    await self._reclaim()
                if short:
                    break  # the key's open runs are all taken

    def _oldest(self, key: ClaimKey) -> list[Waiter]:
        lane = self._waiters.get(key, {})
        return list(itertools.islice(lane.values(), self._per_statement(key)))

    def _hand_out(self, batch: list[Waiter], leased: list[list[asyncpg.Record]]) -> None:
        for waiter, rows in zip(batch, leased, strict=True):
            if not rows:
                continue
            self.unregister(waiter)
            if waiter.future.done():
                # cancelled while the statement ran: not this waiter's, back to the queue
                self._release_later(waiter.claimer.worker_id, rows)
            else:
                waiter.future.set_result(rows)

    def _release_later(self, worker_id: str, rows: list[asyncpg.Record]) -> None:
        task = asyncio.create_task(self._release(worker_id, rows))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)
