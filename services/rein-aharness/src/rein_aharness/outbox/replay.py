"""The delivery loop: hand each pending entry to the close callback, oldest first.

Replay calls only the callback it is given (the queue close adapter); it never runs an
approach, a model or a repository operation, so replaying an entry can repeat a queue
request but never repository work.

Per entry, in this order:

1. the attempt counter is incremented and made durable (`store.begin_attempt`);
2. the callback runs;
3. a normal return (close_disposition applied, reconciled or reopened, or `cancelled`:
   the callback met a refusal that says an operator cancelled the run, an expected end)
   moves the entry to delivered/ (outcome `cancelled` for the last);
   `ConclusiveRefusalError` (a conclusive code) moves it intact to
   quarantine/ with a reason sidecar, and so does `EntryUndeliverable` (a local reason
   it can never be delivered: its changes bundle is lost for good); any other
   `Exception` keeps it pending with only the exception's class name and the
   `delivery_failed` marker (its text may hold a response body or a URL with
   credentials, so it is never written); a `BaseException` that is not an
   `Exception` (KeyboardInterrupt, SystemExit, cancellation) propagates at once,
   leaving the entry pending with its attempt already counted.

Whose entries a pass sends: a replayer that knows the worker identity it delivers as
(`identity`) sends only entries recorded under that identity. An entry recorded under
another one (the worker's id changed while it was pending: the record keeps the original
identity, as it must for an exact repeat) would be answered 403 for that entry alone,
and that answer ends a pass, so one such entry would otherwise stop every pass at the
same place forever. The worker quarantines them (`quarantine_foreign`: its state
directory belongs to one identity, and their close can only be sent by the identity
that recorded it); the operator's `replay` leaves them pending (set aside), so that the
recorded identity's credentials can still deliver them.

Group commit (`group_size`, default 64). Each durable step above costs fsyncs, five
per delivered entry, and a backlog is replayed at the pace of the disk. So a pass takes
the entries `group_size` at a time, the way a database commits several transactions
with one flush:

1. the attempts of the whole group are made durable together (`store.begin_attempts`:
   every updated record written, one flush, every rename, one directory fsync), before
   the first callback of the group begins;
2. the callbacks run one after another, as above; a conclusive refusal or an ordinary
   exception is recorded at once, entry by entry, as above;
3. the group's deliveries are committed together (`store.finish_group`: every delivered
   record written, one flush, renamed, directories fsynced, then the pending records
   removed), and so is undoing the attempt of each entry whose callback never ran (the
   pass stopped early): its counter is what it was.

Every rule above still holds for each entry: its attempt is durable before its callback
begins, a normal return ends in delivered/, and a crash at any point leaves each entry
pending (its attempt counted; sent again by the next pass, where Activity Core
reconciles the repeat), delivered, or both (a move the next pass finishes without a
callback), never lost and never sent without a counted attempt. What grouping changes:
killed (SIGKILL, power loss) after a callback returned but before its group was
committed, up to `group_size` entries are sent again rather than one; and the entries of
the group whose callback had not begun keep the attempt counted for them. An interrupt
or cancellation still propagates, after the deliveries and the uncounted attempts the
group already knows are committed (shielded). `group_size=1` is the entry-by-entry path
above, with its five fsyncs per entry.

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

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import anyio
import anyio.to_thread

from ops_contracts import CONCLUSIVE_CHANGES_REFUSALS, CloseDisposition
from rein_aharness.outbox.errors import ConclusiveRefusalError, EntryUndeliverable
from rein_aharness.outbox.locking import hold_lock_async
from rein_aharness.outbox.record import (
    CANCELLED,
    OutboxRecord,
    QuarantineReason,
    Settlement,
    failure_class_name,
)
from rein_aharness.outbox.store import OutboxStore

__all__ = ["GROUP_SIZE", "DeliveryCallback", "EntryOutcome", "ReplayReport", "replay_pending"]

GROUP_SIZE = 64

DeliveryCallback = Callable[[OutboxRecord], Awaitable[Settlement | None]]

Outcome = Literal["delivered", "cancelled", "failed", "quarantined", "skipped", "set_aside"]


@dataclass(frozen=True)
class EntryOutcome:
    key: str
    run_id: str
    outcome: Outcome
    # disposition, exception class, refusal code, or the quarantine / set-aside reason
    detail: str | None = None


@dataclass
class ReplayReport:
    """What one pass did; `stopped_early` when a `stop_on` failure ended it; `lost`: keys
    of entries the outbox knew pending that are gone (logged by the store)."""

    outcomes: list[EntryOutcome] = field(default_factory=list)
    invalid_quarantined: int = 0
    pruned: int = 0
    stopped_early: bool = False
    lost: tuple[str, ...] = ()

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
    group_size: int = GROUP_SIZE,
) -> ReplayReport:
    """Deliver up to `limit` pending entries (all when None), oldest first.

    Invalid pending records are quarantined whatever the limit: that is local
    bookkeeping, not delivery. `stop_on`: exception types that say the peer is
    unreachable for every entry (an outage, bad credentials); after one of them that
    entry stays pending as usual and the pass ends, instead of failing every remaining
    entry the same way. `identity`: deliver only entries recorded under this worker
    identity; the others are quarantined (`quarantine_foreign`) or set aside, whatever
    the limit, and never sent. `group_size`: how many entries share one flush (see the
    module docstring); 1 is entry by entry.
    """
    if limit is not None and limit < 0:
        raise ValueError("limit must not be negative")
    if group_size < 1:
        raise ValueError("group_size must be at least 1")
    report = ReplayReport()
    async with hold_lock_async(store.paths.replay_lock):
        plan = await anyio.to_thread.run_sync(
            partial(store.prepare_replay, identity=identity, quarantine_foreign=quarantine_foreign)
        )
        report.invalid_quarantined = plan.quarantined
        report.lost = plan.lost
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
        if group_size == 1:
            for record in selected:
                outcome, stop = await _deliver_one(store, deliver, record, stop_on)
                report.outcomes.append(outcome)
                if stop:
                    report.stopped_early = True
                    break
        else:
            for start in range(0, len(selected), group_size):
                group = selected[start : start + group_size]
                if await _deliver_group(store, deliver, group, stop_on, report.outcomes):
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
    except ConclusiveRefusalError as refusal:
        if refusal.code in CONCLUSIVE_CHANGES_REFUSALS:
            await anyio.to_thread.run_sync(store.quarantine_refused, record.key, refusal.code)
            return EntryOutcome(record.key, record.run_id, "quarantined", refusal.code.value), False
        return await _failed(store, record, refusal, stop_on)
    except EntryUndeliverable as undeliverable:
        return await _undeliverable(store, record, undeliverable), False
    except Exception as exc:
        return await _failed(store, record, exc, stop_on)
    settled = _settlement(disposition)
    await anyio.to_thread.run_sync(store.mark_delivered, record.key, settled)
    return _settled_outcome(record, settled), False


def _settlement(value: object) -> Settlement | None:
    if isinstance(value, CloseDisposition):
        return value
    return CANCELLED if value == CANCELLED else None


def _settled_outcome(record: OutboxRecord, settled: Settlement | None) -> EntryOutcome:
    if settled == CANCELLED:
        return EntryOutcome(record.key, record.run_id, "cancelled", CANCELLED)
    detail = settled.value if isinstance(settled, CloseDisposition) else None
    return EntryOutcome(record.key, record.run_id, "delivered", detail)


async def _undeliverable(
    store: OutboxStore, record: OutboxRecord, undeliverable: EntryUndeliverable
) -> EntryOutcome:
    reason = QuarantineReason(undeliverable.reason)
    await anyio.to_thread.run_sync(store.quarantine_undeliverable, record.key, reason)
    return EntryOutcome(record.key, record.run_id, "quarantined", reason.value)


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


async def _deliver_group(
    store: OutboxStore,
    deliver: DeliveryCallback,
    group: Sequence[OutboxRecord],
    stop_on: tuple[type[Exception], ...],
    outcomes: list[EntryOutcome],
) -> bool:
    """Deliver one group (see the module docstring); True when a `stop_on` failure ended
    the pass."""
    attempted = await anyio.to_thread.run_sync(store.begin_attempts, group)
    delivered: list[tuple[OutboxRecord, Settlement | None]] = []
    begun = 0  # entries whose callback began (or that were skipped)
    stop = False
    try:
        for original, current in zip(group, attempted, strict=True):
            begun += 1
            if current is None:
                outcomes.append(EntryOutcome(original.key, original.run_id, "skipped"))
                continue
            try:
                disposition = await deliver(current)
            except EntryUndeliverable as undeliverable:
                outcomes.append(await _undeliverable(store, current, undeliverable))
                continue
            except ConclusiveRefusalError as refusal:
                if refusal.code in CONCLUSIVE_CHANGES_REFUSALS:
                    await anyio.to_thread.run_sync(
                        store.quarantine_refused, current.key, refusal.code
                    )
                    outcomes.append(
                        EntryOutcome(current.key, current.run_id, "quarantined", refusal.code.value)
                    )
                    continue
                outcome, stop = await _failed(store, current, refusal, stop_on)
            except Exception as exc:
                outcome, stop = await _failed(store, current, exc, stop_on)
            else:
                settled = _settlement(disposition)
                delivered.append((current, settled))
                outcome = _settled_outcome(current, settled)
            outcomes.append(outcome)
            if stop:
                break
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _finish(store, delivered, group, attempted, begun)
        raise
    await _finish(store, delivered, group, attempted, begun)
    return stop


async def _finish(
    store: OutboxStore,
    delivered: list[tuple[OutboxRecord, Settlement | None]],
    group: Sequence[OutboxRecord],
    attempted: Sequence[OutboxRecord | None],
    begun: int,
) -> None:
    not_attempted = [
        (current, original)
        for original, current in zip(group[begun:], attempted[begun:], strict=True)
        if current is not None
    ]
    await anyio.to_thread.run_sync(store.finish_group, delivered, not_attempted)
