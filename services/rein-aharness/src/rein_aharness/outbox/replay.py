"""The delivery loop: hand each pending entry to the close callback, oldest first.

Replay calls only the callback it is given (the queue close adapter); it never runs an
approach, a model or a repository operation, so replaying an entry can repeat a queue
request but never repository work.

Per entry, in this order:

1. the attempt counter is incremented and made durable (`store.begin_attempt`);
2. the callback runs;
3. a normal return (close_disposition applied, reconciled or reopened) moves the entry
   to delivered/; `CloseRefusedError` with a conclusive code moves it intact to
   quarantine/ with a reason sidecar; any other `Exception` keeps it pending with only
   the exception's class name and the `delivery_failed` marker (its text may hold a
   response body or a URL with credentials, so it is never written); a `BaseException`
   that is not an `Exception` (KeyboardInterrupt, SystemExit, cancellation) propagates
   at once, leaving the entry pending with its attempt already counted.

Whose entries a pass sends: a replayer that knows the worker identity it delivers as
(`identity`) sends only entries recorded under that identity. An entry recorded under
another one (the worker's id changed while it was pending: the record keeps the original
identity, as it must for an exact repeat) would be answered 403 for that entry alone,
and that answer ends a pass, so one such entry would otherwise stop every pass at the
same place forever. The worker quarantines them (`quarantine_foreign`: its state
directory belongs to one identity, and their close can only be sent by the identity
that recorded it); the operator's `replay` leaves them pending (set aside), so that the
recorded identity's credentials can still deliver them.

Which failures end a pass (`stop_on`): those that every later entry would meet too. For
the worker these are a transport outage and an auth refusal (401/403) of an entry
recorded under its own identity: Activity Core checks credentials before the body, and
the body's only identity is the worker id, so such a refusal is the worker's
credentials, the same for every entry and for a claim, never this one entry.

Locking: the whole pass holds the store-wide `replay.lock`, so two replayers (the
worker and an operator, or two workers sharing a state dir) never run a callback for
the same entry at the same time; the second one waits and then finds the entry gone
from pending/. A per-entry lock would allow parallel deliveries but needs either lock
files that are deleted (racy against a waiter holding the old inode) or that pile up,
and cannot be a flock on the entry file itself, since every state update replaces that
file's inode. One deliverer per store also keeps deliveries in age order. Enqueue takes
only the short `store.lock`, never `replay.lock`, so a slow delivery does not hold up
recording a new close.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import anyio.to_thread

from ops_contracts import CONCLUSIVE_CLOSE_REFUSALS, CloseDisposition
from rein_aharness.outbox.errors import CloseRefusedError
from rein_aharness.outbox.locking import hold_lock_async
from rein_aharness.outbox.record import OutboxRecord, QuarantineReason, failure_class_name
from rein_aharness.outbox.store import OutboxStore

__all__ = ["DeliveryCallback", "EntryOutcome", "ReplayReport", "replay_pending"]

DeliveryCallback = Callable[[OutboxRecord], Awaitable[CloseDisposition | None]]

Outcome = Literal["delivered", "failed", "quarantined", "skipped", "set_aside"]


@dataclass(frozen=True)
class EntryOutcome:
    key: str
    run_id: str
    outcome: Outcome
    # disposition, exception class, refusal code, or the quarantine / set-aside reason
    detail: str | None = None


@dataclass
class ReplayReport:
    """What one pass did; `stopped_early` when a `stop_on` failure ended it."""

    outcomes: list[EntryOutcome] = field(default_factory=list)
    invalid_quarantined: int = 0
    pruned: int = 0
    stopped_early: bool = False

    def count(self, outcome: Outcome) -> int:
        return sum(1 for item in self.outcomes if item.outcome == outcome)


async def replay_pending(
    store: OutboxStore,
    deliver: DeliveryCallback,
    *,
    limit: int | None = None,
    stop_on: tuple[type[Exception], ...] = (),
    identity: str | None = None,
    quarantine_foreign: bool = False,
) -> ReplayReport:
    """Deliver up to `limit` pending entries (all when None), oldest first.

    Invalid pending records are quarantined whatever the limit: that is local
    bookkeeping, not delivery. `stop_on`: exception types that say the peer is
    unreachable for every entry (an outage, bad credentials); after one of them that
    entry stays pending as usual and the pass ends, instead of failing every remaining
    entry the same way. `identity`: deliver only entries recorded under this worker
    identity; the others are quarantined (`quarantine_foreign`) or set aside, whatever
    the limit, and never sent.
    """
    if limit is not None and limit < 0:
        raise ValueError("limit must not be negative")
    report = ReplayReport()
    async with hold_lock_async(store.paths.replay_lock):
        plan = await anyio.to_thread.run_sync(
            partial(store.prepare_replay, identity=identity, quarantine_foreign=quarantine_foreign)
        )
        report.invalid_quarantined = plan.quarantined
        foreign_outcome: Outcome = "quarantined" if quarantine_foreign else "set_aside"
        for record in plan.foreign:
            report.outcomes.append(
                EntryOutcome(
                    record.key,
                    record.run_id,
                    foreign_outcome,
                    QuarantineReason.foreign_worker_identity.value,
                )
            )
        selected = plan.deliverable if limit is None else plan.deliverable[:limit]
        for record in selected:
            outcome, stop = await _deliver_one(store, deliver, record, stop_on)
            report.outcomes.append(outcome)
            if stop:
                report.stopped_early = True
                break
        report.pruned = await anyio.to_thread.run_sync(store.prune_delivered)
    return report


async def _deliver_one(
    store: OutboxStore,
    deliver: DeliveryCallback,
    record: OutboxRecord,
    stop_on: tuple[type[Exception], ...],
) -> tuple[EntryOutcome, bool]:
    current = await anyio.to_thread.run_sync(store.begin_attempt, record.key)
    if current is None:
        return EntryOutcome(record.key, record.run_id, "skipped"), False
    try:
        disposition = await deliver(current)
    except CloseRefusedError as refusal:
        if refusal.code in CONCLUSIVE_CLOSE_REFUSALS:
            await anyio.to_thread.run_sync(store.quarantine_refused, record.key, refusal.code)
            return EntryOutcome(record.key, record.run_id, "quarantined", refusal.code.value), False
        return await _failed(store, record, refusal, stop_on)
    except Exception as exc:
        return await _failed(store, record, exc, stop_on)
    if not isinstance(disposition, CloseDisposition):
        disposition = None
    await anyio.to_thread.run_sync(store.mark_delivered, record.key, disposition)
    detail = disposition.value if disposition is not None else None
    return EntryOutcome(record.key, record.run_id, "delivered", detail), False


async def _failed(
    store: OutboxStore,
    record: OutboxRecord,
    exc: Exception,
    stop_on: tuple[type[Exception], ...],
) -> tuple[EntryOutcome, bool]:
    name = failure_class_name(exc)
    await anyio.to_thread.run_sync(partial(store.record_failure, record.key, name))
    stop = bool(stop_on) and isinstance(exc, stop_on)
    return EntryOutcome(record.key, record.run_id, "failed", name), stop
