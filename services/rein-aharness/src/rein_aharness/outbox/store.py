"""The outbox store: enqueue, inspect, and the state transitions replay drives.

Layout under the root (all directories 0700, all files 0600)::

    outbox.json           the outbox's identity marker (identity.py)
    ledger                the keys it knows pending (ledger.py)
    store.lock            flock held briefly around every read-modify-write
    replay.lock           flock held across a whole replay pass (see replay.py)
    pending/<key>.json    entries waiting for delivery (state "pending")
    delivered/<key>.json  entries whose close Activity Core accepted (state "delivered")
    quarantine/<name>     records that must not be delivered automatically, moved intact,
    quarantine/<stem>.reason.json   each with a bounded reason sidecar

Every method that changes the tree holds `store.lock` and writes through
`durable.write_atomic` (or, for a group of entries, `durable.write_group`: the same
steps with one flush for all of them), so each transition has one commit point:

* enqueue: the replace of `pending/<key>.json`;
* attempt / failure: the replace of `pending/<key>.json` with the new counters;
* delivered: the replace of `delivered/<key>.json` (state "delivered"); removing
  `pending/<key>.json` afterwards only finishes the move. A crash between the two leaves
  both files; the next scan sees an identical delivered record and completes the move
  without calling the callback again;
* quarantine: the sidecar is written first, then the record is renamed intact, so a
  quarantined record always has its reason. A crash between the two leaves the record
  where it was, to be judged again.

`begin_attempts` and `finish_group` are `begin_attempt` and `mark_delivered` for a group
of entries (replay.py, group commit): each entry keeps its own commit point above, and
only the flushes are shared.

Retention: quarantine is never pruned. `delivered/` keeps every record delivered in the
last 7 days and, beyond that, the newest 1,000; older ones are removed at the end of
each replay pass (`prune_delivered`).

What a pruned identity loses, and what still protects it. While its delivered record is
kept, enqueueing the same (run id, transaction id) again returns "delivered" for the
identical intent and raises OutboxConflictError for a different one. Once it is pruned
the outbox has forgotten the identity: the same enqueue writes a new pending entry, and
the conflict is no longer refused here. What then stands between that entry and the run:

* the worker never enqueues an identity twice: its transaction id names the claim
  attempt (`rtx-<run-id>.<attempt>`), one attempt is closed once, and a run is never
  executed again under an attempt it already had (a new claim is a new attempt);
* Activity Core, for anything else that enqueues: a terminal run accepts only the exact
  repeat of its recorded intent by its owner (`reconciled`) and refuses every other
  intent with `terminal_conflict`; an open run answers `state_conflict`, a run claimed by
  another worker `wrong_owner`; and a run this same worker holds again under a later
  attempt (after a reopened failure or an expired lease) refuses the old attempt with
  `expired_lease` because every entry carries its attempt (fencing). Each of these is
  conclusive: the entry goes to quarantine/ for an operator, it is never applied.

Not protected: an entry with no attempt (a v1 record whose transaction id is not the
worker's `rtx-` shape, or a caller that enqueues such an identity itself) is sent
unfenced, so if the same worker holds the run again under a later attempt with an active
lease, Activity Core applies it to that attempt. The worker itself never writes such an
entry. Also, an identical intent enqueued again after pruning is delivered again: a
terminal run answers `reconciled`, but a close that had reopened the run meets one of
the refusals above and is quarantined (noise for an operator, not a changed run).

Names starting with `.tmp-` are reserved for temp files. They are written only under
`store.lock`, so one found while holding it is a crash leftover and is removed.

Opening a store checks that its directories deserve trust (trust.py) and that it is the
outbox its state directory recorded (identity.py); with `verify` (the default, and what
the worker uses) it also refuses an outbox that lost entries it knew pending
(OutboxIntegrityError). Every replay pass brings the ledger up to date and logs a lost
entry once; `snapshot` reports them (`lost`) without writing anything.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from ops_contracts import CloseAction, RefusalCode, canonical_json
from rein_aharness.outbox.durable import (
    FileVersion,
    file_version,
    fsync_dir,
    is_temp_name,
    move_no_clobber,
    read_bounded,
    unlink_durable,
    write_atomic,
    write_group,
)
from rein_aharness.outbox.errors import (
    OutboxConflictError,
    OutboxIntegrityError,
    OutboxReplacedError,
)
from rein_aharness.outbox.identity import OutboxMarker, open_outbox
from rein_aharness.outbox.intent import PreparedClose, prepare_close
from rein_aharness.outbox.ledger import (
    Ledger,
    LedgerProblem,
    append_ledger,
    read_ledger,
    scan_keys,
    write_ledger,
)
from rein_aharness.outbox.locking import hold_lock
from rein_aharness.outbox.paths import OutboxPaths
from rein_aharness.outbox.record import (
    MAX_RECORD_BYTES,
    DeliveryFailure,
    EntryState,
    OutboxRecord,
    QuarantineReason,
    RecordProblem,
    Settlement,
    encode_record,
    entry_name,
    key_from_name,
    parse_record,
)

__all__ = [
    "SIDECAR_FORMAT",
    "SIDECAR_SUFFIX",
    "EnqueueResult",
    "EntrySummary",
    "OutboxSnapshot",
    "OutboxStore",
    "ReplayPlan",
    "Retention",
    "sidecar_name",
]

log = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".reason.json"
SIDECAR_FORMAT = "rein-aharness/close-outbox-quarantine-reason/v1"
_MAX_SIDECAR_BYTES = 8 * 1024
_MAX_NAME_CHARS = 300

StoreState = Literal["pending", "delivered", "quarantined"]


@dataclass(frozen=True)
class Retention:
    """Delivered records older than `max_age` and beyond the newest `keep_newest` go."""

    max_age: timedelta = timedelta(days=7)
    keep_newest: int = 1000


@dataclass(frozen=True)
class EnqueueResult:
    """The state the identity is in after enqueue; `created` when this call wrote it."""

    state: StoreState
    record: OutboxRecord
    created: bool


@dataclass(frozen=True)
class EntrySummary:
    """One pending or quarantined item, as status shows it."""

    state: StoreState
    name: str
    key: str | None
    run_id: str | None
    action: str | None
    attempts: int | None
    last_failure_class: str | None
    created_at: datetime | None
    reason: str | None
    code: str | None
    worker_id: str | None = None  # the identity the close was recorded under
    run_attempt: int | None = None  # the claim attempt it was decided under


@dataclass(frozen=True)
class ReplayPlan:
    """Deliverable entries, oldest first; how many invalid records were quarantined; the
    entries recorded under another worker identity (quarantined or set aside); the keys
    of lost entries."""

    deliverable: list[OutboxRecord]
    quarantined: int
    foreign: list[OutboxRecord] = field(default_factory=list)
    lost: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutboxSnapshot:
    """`lost`: keys the outbox knew pending that are in none of its directories."""

    root: Path
    taken_at: datetime
    pending: tuple[EntrySummary, ...]
    delivered_count: int
    quarantined: tuple[EntrySummary, ...]
    lost: tuple[str, ...] = ()
    outbox_id: str | None = None
    created_by: str | None = None  # the worker identity that created the outbox


def sidecar_name(entry: str) -> str:
    stem = entry[: -len(".json")] if entry.endswith(".json") else entry
    return stem + SIDECAR_SUFFIX


def _display_name(name: str) -> str:
    """A printable, bounded rendering of a file name (which may not be valid UTF-8)."""
    raw = os.fsencode(name)
    text = raw.decode("utf-8", "backslashreplace")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text[:_MAX_NAME_CHARS]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class OutboxStore:
    """One outbox root. Safe to use from several threads and processes at once.

    `identity`: the worker identity opening it, recorded in the marker of an outbox this
    creates. `verify`: refuse (OutboxIntegrityError) an outbox that lost entries it knew
    pending; without it they are only reported (`snapshot().lost`), which is what the
    operator commands want. Either way an untrusted directory (OutboxUntrustedError) and
    a replaced outbox (OutboxReplacedError) are refused.
    """

    def __init__(
        self,
        root: Path,
        *,
        clock: Callable[[], datetime] = _utc_now,
        retention: Retention | None = None,
        identity: str | None = None,
        verify: bool = True,
    ) -> None:
        self.paths = OutboxPaths(root)
        self._clock = clock
        self._retention = retention or Retention()
        self._validated_delivered: dict[str, tuple[FileVersion, datetime]] = {}
        # The pending records this store last read or wrote, by key, with the version of
        # the file: a group does not parse again what it already holds (begin_attempts).
        self._pending_versions: dict[str, tuple[FileVersion, OutboxRecord]] = {}
        self._reported_lost: set[str] = set()
        # Creates the tree (with both lock files, 0600 from the start) if it is new.
        self.marker: OutboxMarker = open_outbox(self.paths, identity=identity, clock=clock)
        if verify:
            with self._locked():
                # Not logged: the refusal is the one line that reports it.
                lost = self._reconcile(log_lost=False)
            if lost:
                shown = ", ".join(lost[:3]) + (", ..." if len(lost) > 3 else "")
                raise OutboxIntegrityError(
                    f"{self.paths.root}: {len(lost)} entries known pending are gone (in none "
                    f"of pending/, delivered/, quarantine/): {shown}; restore them, or write "
                    f"them off with `rein-aharness close-outbox adopt`",
                    lost,
                )

    def check_integrity(self) -> tuple[str, ...]:
        """Bring the ledger up to date with the tree; the keys of lost entries."""
        with self._locked():
            return self._reconcile()

    # -- enqueue ---------------------------------------------------------------------

    def enqueue_close(
        self,
        *,
        run_id: str,
        transaction_id: str | None,
        worker_id: str,
        action: CloseAction | str,
        result: dict[str, Any] | None,
        error: str | None = None,
        reopen: bool = False,
        attempt: int | None = None,
    ) -> EnqueueResult:
        """Build the bounded v1 intent (see intent.prepare_close) and enqueue it."""
        return self.enqueue(
            prepare_close(
                run_id=run_id,
                transaction_id=transaction_id,
                worker_id=worker_id,
                action=action,
                result=result,
                error=error,
                reopen=reopen,
                attempt=attempt,
            )
        )

    def enqueue(self, prepared: PreparedClose) -> EnqueueResult:
        """Durably record the intent, or return the state its identity is already in.

        Identical intent (and attempt) already pending or delivered: that state, nothing
        written. A different worker, action, result, error, reopen or attempt under the
        same identity: OutboxConflictError. An unreadable record under the key is
        quarantined first and does not block the new intent (it is kept for the
        operator; its intent cannot be known). A readable quarantined record under the
        key is reported (identical: state "quarantined", nothing written) or refused
        (different). The protection ends when a delivered record is pruned: see the
        module docstring.
        """
        name = entry_name(prepared.key)
        with self._locked():
            for state in ("pending", "delivered"):
                directory = self._dir(state)
                if not os.path.lexists(directory / name):
                    continue
                try:
                    existing = self._read(directory, name, state)
                except RecordProblem as problem:
                    self._quarantine(directory, name, state, problem.reason)
                    continue
                return self._existing(state, existing, prepared)
            quarantined = self._read_quarantined(name)
            if quarantined is not None:
                return self._existing("quarantined", quarantined, prepared)
            record = OutboxRecord(
                key=prepared.key,
                state="pending",
                run_id=prepared.run_id,
                transaction_id=prepared.transaction_id,
                intent=prepared.intent,
                intent_digest=prepared.intent_digest,
                created_at=self._clock(),
                attempts=0,
                attempt=prepared.attempt,
            )
            self._write(record)
            # After the entry is durable, before enqueue returns (ledger.py: why this order).
            append_ledger(self.paths.ledger, added=[record.key], durable=True)
            return EnqueueResult(state="pending", record=record, created=True)

    @staticmethod
    def _existing(
        state: StoreState, existing: OutboxRecord, prepared: PreparedClose
    ) -> EnqueueResult:
        if existing.intent_digest == prepared.intent_digest and (
            existing.run_id,
            existing.transaction_id,
            existing.attempt,
        ) == (prepared.run_id, prepared.transaction_id, prepared.attempt):
            return EnqueueResult(state=state, record=existing, created=False)
        old, new = existing.intent, prepared.intent
        fields = [
            name
            for name in ("worker_id", "action", "result", "error", "reopen")
            if getattr(old, name) != getattr(new, name)
        ]
        if existing.attempt != prepared.attempt:
            fields.append("attempt")
        raise OutboxConflictError(existing.key, state, fields or ["intent"])

    # -- inspection ------------------------------------------------------------------

    def snapshot(self) -> OutboxSnapshot:
        """A consistent read-only view: pending and quarantined items, delivered count."""
        with hold_lock(self.paths.store_lock, shared=True):
            pending: list[EntrySummary] = []
            for name in self._names(self.paths.pending):
                try:
                    record = self._read(self.paths.pending, name, "pending")
                except RecordProblem as problem:
                    pending.append(self._summary("pending", name, None, problem.reason, None))
                    continue
                if self._delivered_twin(record) is not None:
                    continue  # an interrupted move: it is delivered
                pending.append(self._summary("pending", name, record, None, None))
            delivered = sum(1 for _ in self._names(self.paths.delivered))
            quarantined = [self._quarantine_summary(name) for name in self._quarantine_names()]
            ledger = self._ledger()
            in_pending, settled = scan_keys(self.paths)
        pending.sort(key=_age_order)
        quarantined.sort(key=_age_order)
        return OutboxSnapshot(
            root=self.paths.root,
            taken_at=self._clock(),
            pending=tuple(pending),
            delivered_count=delivered,
            quarantined=tuple(quarantined),
            lost=tuple(sorted(ledger.known - in_pending - settled)),
            outbox_id=self.marker.outbox_id,
            created_by=self.marker.worker_id,
        )

    def _quarantine_summary(self, name: str) -> EntrySummary:
        record = self._read_quarantined(name)
        reason: str | None = None
        code: str | None = None
        sidecar = self._read_sidecar(sidecar_name(name))
        if sidecar is not None:
            reason = _bounded_str(sidecar.get("reason"))
            code = _bounded_str(sidecar.get("code"))
        return self._summary("quarantined", name, record, reason or "missing_reason", code)

    @staticmethod
    def _summary(
        state: StoreState,
        name: str,
        record: OutboxRecord | None,
        reason: str | None,
        code: str | None,
    ) -> EntrySummary:
        failure = record.last_failure if record is not None else None
        return EntrySummary(
            state=state,
            name=_display_name(name),
            key=record.key if record is not None else key_from_name(name),
            run_id=record.run_id if record is not None else None,
            action=record.intent.action.value if record is not None else None,
            attempts=record.attempts if record is not None else None,
            last_failure_class=failure.exception_class if failure is not None else None,
            created_at=record.created_at if record is not None else None,
            reason=reason,
            code=code,
            worker_id=record.intent.worker_id if record is not None else None,
            run_attempt=record.attempt if record is not None else None,
        )

    # -- replay transitions ----------------------------------------------------------

    def prepare_replay(
        self, *, identity: str | None = None, quarantine_foreign: bool = False
    ) -> ReplayPlan:
        """Tidy the tree and return the deliverable pending entries, oldest first.

        Removes stray temp files, quarantines every pending record that is not valid,
        and finishes moves to delivered/ that a crash interrupted.

        `identity`: the worker identity the caller delivers as. A pending entry recorded
        under another identity cannot be delivered with the caller's credentials (the
        queue answers 403 for it, and only for it): it is not deliverable, and is
        returned in `foreign`; with `quarantine_foreign` it is also moved to quarantine/
        (reason `foreign_worker_identity`), otherwise it stays pending (set aside).
        """
        with self._locked():
            before = sum(1 for _ in self._quarantine_names())
            for directory in self.paths.directories():
                self._remove_stray_temps(directory)
            deliverable: list[OutboxRecord] = []
            foreign: list[OutboxRecord] = []
            for name in self._names(self.paths.pending):
                record = self._load_pending(name)
                if record is None:
                    continue
                if identity is not None and record.intent.worker_id != identity:
                    if quarantine_foreign:
                        self._quarantine(
                            self.paths.pending,
                            name,
                            "pending",
                            QuarantineReason.foreign_worker_identity,
                            record=record,
                        )
                    foreign.append(record)
                    continue
                deliverable.append(record)
            quarantined = sum(1 for _ in self._quarantine_names()) - before
            if quarantine_foreign:
                quarantined -= len(foreign)
            lost = self._reconcile()
        deliverable.sort(key=_delivery_order)
        foreign.sort(key=_delivery_order)
        return ReplayPlan(
            deliverable=deliverable, quarantined=quarantined, foreign=foreign, lost=lost
        )

    def begin_attempt(self, key: str) -> OutboxRecord | None:
        """Durably count one more delivery attempt; None if the entry is no longer
        deliverable (delivered, quarantined or gone meanwhile)."""
        with self._locked():
            record = self._load_pending(entry_name(key))
            if record is None:
                return None
            updated = record.model_copy(
                update={"attempts": record.attempts + 1, "last_attempt_at": self._clock()}
            )
            self._write(updated)
            return updated

    def record_failure(self, key: str, exception_class: str) -> None:
        """Keep the entry pending, noting only the exception's class and the marker."""
        with self._locked():
            record = self._load_pending(entry_name(key))
            if record is None:
                return
            failure = DeliveryFailure(exception_class=exception_class)
            self._write(record.model_copy(update={"last_failure": failure}))

    def mark_delivered(self, key: str, disposition: Settlement | None) -> None:
        """Commit the entry to delivered/ (state "delivered"), then drop it from pending/."""
        name = entry_name(key)
        with self._locked():
            record = self._load_pending(name)
            if record is None:
                return
            delivered = record.model_copy(
                update={
                    "state": "delivered",
                    "delivered_at": self._clock(),
                    "disposition": disposition,
                }
            )
            self._write(delivered)
            unlink_durable(self.paths.pending / name)
            append_ledger(self.paths.ledger, removed=[key], durable=False)

    def quarantine_refused(self, key: str, code: RefusalCode) -> None:
        """Move the entry intact to quarantine/ after a conclusive refusal."""
        name = entry_name(key)
        with self._locked():
            record = self._load_pending(name)
            if record is None:
                return
            self._quarantine(
                self.paths.pending,
                name,
                "pending",
                QuarantineReason.conclusive_refusal,
                code=code.value,
                record=record,
            )

    def quarantine_undeliverable(self, key: str, reason: QuarantineReason) -> None:
        """Move the entry intact to quarantine/: it can never be delivered (`reason`)."""
        name = entry_name(key)
        with self._locked():
            record = self._load_pending(name)
            if record is None:
                return
            self._quarantine(self.paths.pending, name, "pending", reason, record=record)

    def pending_records(self) -> list[OutboxRecord]:
        """The valid pending records (nothing is moved or quarantined here)."""
        with self._locked():
            records: list[OutboxRecord] = []
            for name in self._names(self.paths.pending):
                try:
                    records.append(self._read(self.paths.pending, name, "pending"))
                except RecordProblem:  # an invalid file is the next replay's to quarantine
                    continue
            return records

    # -- grouped replay transitions (group commit; see replay.py) ---------------------

    def begin_attempts(self, records: Sequence[OutboxRecord]) -> list[OutboxRecord | None]:
        """`begin_attempt` for several entries with one flush: every attempt is durable
        when this returns, before any of their callbacks begins. None for an entry that
        is no longer deliverable.

        A record this store read or wrote, whose file has not changed since (same inode,
        mtime and size), is not parsed again.
        """
        with self._locked():
            current = [self._pending_as_known(record.key) for record in records]
            now = self._clock()
            updated = [
                None
                if record is None
                else record.model_copy(
                    update={"attempts": record.attempts + 1, "last_attempt_at": now}
                )
                for record in current
            ]
            self._write_pending_group([record for record in updated if record is not None])
            return updated

    def finish_group(
        self,
        delivered: Sequence[tuple[OutboxRecord, Settlement | None]],
        not_attempted: Sequence[tuple[OutboxRecord, OutboxRecord]] = (),
    ) -> None:
        """Commit a group's outcomes with one flush: each delivered entry (the record
        begin_attempts returned, with its disposition) to delivered/, then drop it from
        pending/; and each `(attempted, original)` whose callback never ran back to its
        original record, so its attempt is not counted.

        An entry whose pending file is no longer the one begin_attempts wrote is handled
        one by one, as mark_delivered would (or left alone, for a not-attempted one).
        """
        with self._locked():
            now = self._clock()
            writes: list[tuple[Path, str, bytes]] = []
            moved: list[tuple[str, OutboxRecord]] = []
            restored: list[OutboxRecord] = []
            changed: list[tuple[str, Settlement | None]] = []
            for record, disposition in delivered:
                if not self._is_ours(record):
                    changed.append((record.key, disposition))
                    continue
                final = record.model_copy(
                    update={"state": "delivered", "delivered_at": now, "disposition": disposition}
                )
                writes.append((self.paths.delivered, entry_name(final.key), encode_record(final)))
                moved.append((entry_name(final.key), final))
            for attempted, original in not_attempted:
                if self._is_ours(attempted):
                    writes.append(
                        (self.paths.pending, entry_name(original.key), encode_record(original))
                    )
                    restored.append(original)
            versions = write_group(writes)
            for (name, final), version in zip(moved, versions[: len(moved)], strict=True):
                assert final.delivered_at is not None
                self._validated_delivered[name] = (version, final.delivered_at)
            for original, version in zip(restored, versions[len(moved) :], strict=True):
                self._pending_versions[original.key] = (version, original)
            # The delivered records are durable: removing the pending ones finishes the
            # moves (a crash before this leaves twins, which the next pass settles).
            for name, final in moved:
                os.unlink(f"{self.paths.pending}/{name}")
                self._pending_versions.pop(final.key, None)
            if moved:
                fsync_dir(self.paths.pending)
                append_ledger(
                    self.paths.ledger, removed=[final.key for _, final in moved], durable=False
                )
        for key, disposition in changed:
            self.mark_delivered(key, disposition)

    def _pending_as_known(self, key: str) -> OutboxRecord | None:
        """The deliverable pending record under `key`, from the cache while its file is
        the version read or written last (caller holds the store lock)."""
        name = entry_name(key)
        cached = self._pending_versions.get(key)
        if cached is not None:
            try:
                info = os.lstat(f"{self.paths.pending}/{name}")
            except FileNotFoundError:
                return None
            if file_version(info) == cached[0] and not os.path.lexists(
                f"{self.paths.delivered}/{name}"
            ):
                return cached[1]
        return self._load_pending(name)

    def _is_ours(self, record: OutboxRecord) -> bool:
        """Whether pending/ still holds exactly `record` as this store wrote it."""
        cached = self._pending_versions.get(record.key)
        if cached is None or cached[1] != record:
            return False
        try:
            info = os.lstat(f"{self.paths.pending}/{entry_name(record.key)}")
        except FileNotFoundError:
            return False
        return file_version(info) == cached[0]

    def _write_pending_group(self, records: Sequence[OutboxRecord]) -> None:
        versions = write_group(
            [(self.paths.pending, entry_name(r.key), encode_record(r)) for r in records]
        )
        for record, version in zip(records, versions, strict=True):
            self._pending_versions[record.key] = (version, record)

    def prune_delivered(self) -> int:
        """Apply the delivered/ retention; quarantine invalid delivered records.

        Every delivered record is validated, but only once per file version in this
        process (keyed by inode, mtime and size), so the worker's replay before each
        claim costs a directory listing and a stat per record, not a parse.
        """
        with self._locked():
            records: list[tuple[datetime, str]] = []
            seen: dict[str, tuple[FileVersion, datetime]] = {}
            for name in self._names(self.paths.delivered):
                delivered_at = self._delivered_at(name, seen)
                if delivered_at is not None:
                    records.append((delivered_at, name))
            self._validated_delivered = seen
            records.sort(reverse=True)
            horizon = self._clock() - self._retention.max_age
            doomed = [
                name
                for delivered_at, name in records[self._retention.keep_newest :]
                if delivered_at < horizon
            ]
            if not doomed:
                return 0
            # A delivered record is what tells a moved entry from a lost one: the ledger
            # must say it left pending/ (durably) before the record goes.
            keys = {key for key in map(key_from_name, doomed) if key is not None}
            append_ledger(
                self.paths.ledger, removed=sorted(keys & self._ledger().known), durable=True
            )
            for name in doomed:
                os.unlink(self.paths.delivered / name)
            fsync_dir(self.paths.delivered)
            return len(doomed)

    # -- internals -------------------------------------------------------------------

    def _delivered_at(
        self, name: str, seen: dict[str, tuple[FileVersion, datetime]]
    ) -> datetime | None:
        """The record's delivered_at, or None after quarantining an invalid record."""
        directory = self.paths.delivered
        try:
            info = os.lstat(directory / name)
        except OSError:
            info = None
        if info is not None:
            version = file_version(info)
            cached = self._validated_delivered.get(name)
            if cached is not None and cached[0] == version:
                seen[name] = cached
                return cached[1]
        try:
            record = self._read(directory, name, "delivered")
        except RecordProblem as problem:
            self._quarantine(directory, name, "delivered", problem.reason)
            return None
        assert record.delivered_at is not None  # parse_record checks it
        if info is not None:
            seen[name] = (file_version(info), record.delivered_at)
        return record.delivered_at

    def _locked(self) -> AbstractContextManager[None]:
        return hold_lock(self.paths.store_lock)

    def _ledger(self) -> Ledger:
        """The ledger, which must be this outbox's (caller holds the store lock)."""
        try:
            ledger = read_ledger(self.paths.ledger)
        except LedgerProblem as problem:
            raise OutboxReplacedError(str(problem)) from None
        if ledger.outbox_id != self.marker.outbox_id:
            raise OutboxReplacedError(
                f"{self.paths.ledger}: belongs to outbox {ledger.outbox_id}, not to "
                f"{self.marker.outbox_id}, which was opened here (the directory was replaced)"
            )
        return ledger

    def _reconcile(self, *, log_lost: bool = True) -> tuple[str, ...]:
        """Bring the ledger up to date with the tree; the keys of lost entries, each
        logged once per store (`log_lost`). Caller holds the store lock.

        Pending entries it does not know (an enqueue killed before its ledger line)
        become known; known ones that reached delivered/ or quarantine/ (a move killed
        before its ledger line) stop being known. Neither is an alarm.
        """
        ledger = self._ledger()
        in_pending, settled = scan_keys(self.paths)
        unknown = in_pending - ledger.known
        moved = (ledger.known & settled) - in_pending
        if unknown or moved:
            append_ledger(
                self.paths.ledger, added=sorted(unknown), removed=sorted(moved), durable=True
            )
        known = (ledger.known | unknown) - moved
        if ledger.needs_compaction():
            write_ledger(self.paths, self.marker.outbox_id, known)
        lost = known - in_pending - settled
        if not log_lost:
            return tuple(sorted(lost))
        for key in sorted(lost - self._reported_lost):
            log.error(
                "close outbox %s: entry %s was known pending and is gone: in none of "
                "pending/, delivered/, quarantine/",
                self.paths.root,
                key,
                extra={"key": key},
            )
        self._reported_lost |= lost
        return tuple(sorted(lost))

    def _dir(self, state: EntryState) -> Path:
        return self.paths.pending if state == "pending" else self.paths.delivered

    def _write(self, record: OutboxRecord) -> None:
        write_atomic(self._dir(record.state), entry_name(record.key), encode_record(record))

    @staticmethod
    def _names(directory: Path) -> Iterator[str]:
        for name in sorted(os.listdir(directory)):
            if not is_temp_name(name):
                yield name

    def _quarantine_names(self) -> Iterator[str]:
        for name in self._names(self.paths.quarantine):
            if not name.endswith(SIDECAR_SUFFIX):
                yield name

    @staticmethod
    def _remove_stray_temps(directory: Path) -> None:
        for name in os.listdir(directory):
            path = directory / name
            if is_temp_name(name) and stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)

    @staticmethod
    def _read(directory: Path, name: str, state: EntryState) -> OutboxRecord:
        return OutboxStore._read_versioned(directory, name, state)[0]

    @staticmethod
    def _read_versioned(
        directory: Path, name: str, state: EntryState
    ) -> tuple[OutboxRecord, FileVersion]:
        """The record and the version of the file it was read from (the caller holds
        the store lock, so the file is not replaced between the two)."""
        path = directory / name
        if key_from_name(name) is None:
            raise RecordProblem(QuarantineReason.unexpected_name)
        try:
            info = os.lstat(path)
        except OSError as exc:
            raise RecordProblem(QuarantineReason.unreadable) from exc
        if not stat.S_ISREG(info.st_mode):
            raise RecordProblem(QuarantineReason.not_regular_file)
        try:
            data = read_bounded(path, MAX_RECORD_BYTES)
        except OSError as exc:
            raise RecordProblem(QuarantineReason.unreadable) from exc
        if data is None:
            raise RecordProblem(QuarantineReason.oversized)
        return parse_record(data, name=name, state=state), file_version(info)

    def _read_quarantined(self, name: str) -> OutboxRecord | None:
        """The record in quarantine/ if it is a valid record (in either state)."""
        path = self.paths.quarantine / name
        if not os.path.lexists(path):
            return None
        for state in ("pending", "delivered"):
            try:
                return self._read(self.paths.quarantine, name, state)
            except RecordProblem:
                continue
        return None

    def _read_sidecar(self, name: str) -> dict[str, object] | None:
        path = self.paths.quarantine / name
        try:
            data = read_bounded(path, _MAX_SIDECAR_BYTES)
            value = json.loads(data) if data is not None else None
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def _load_pending(self, name: str) -> OutboxRecord | None:
        """The valid pending record stored as `name`, after settling its fate.

        Invalid records are quarantined; a record whose identical intent is already in
        delivered/ is the remainder of an interrupted move and is removed; one whose
        delivered twin differs is quarantined. Caller holds the store lock.
        """
        directory = self.paths.pending
        if not os.path.lexists(directory / name):
            return None
        try:
            record, version = self._read_versioned(directory, name, "pending")
        except RecordProblem as problem:
            self._quarantine(directory, name, "pending", problem.reason)
            return None
        self._pending_versions[record.key] = (version, record)
        twin_path = self.paths.delivered / name
        if os.path.lexists(twin_path):
            try:
                twin = self._read(self.paths.delivered, name, "delivered")
            except RecordProblem as problem:
                self._quarantine(self.paths.delivered, name, "delivered", problem.reason)
                return record
            if _same_intent(twin, record):
                unlink_durable(directory / name)
                append_ledger(self.paths.ledger, removed=[record.key], durable=False)
            else:
                self._quarantine(
                    directory, name, "pending", QuarantineReason.conflicts_with_delivered
                )
            return None
        return record

    def _delivered_twin(self, record: OutboxRecord) -> OutboxRecord | None:
        name = entry_name(record.key)
        if not os.path.lexists(self.paths.delivered / name):
            return None
        try:
            twin = self._read(self.paths.delivered, name, "delivered")
        except RecordProblem:
            return None
        return twin if _same_intent(twin, record) else None

    def _quarantine(
        self,
        directory: Path,
        name: str,
        source: EntryState,
        reason: QuarantineReason,
        *,
        code: str | None = None,
        record: OutboxRecord | None = None,
    ) -> str:
        """Sidecar first, then the intact rename; returns the name in quarantine/."""
        target = self._free_quarantine_name(name)
        sidecar: dict[str, object] = {
            "format": SIDECAR_FORMAT,
            "reason": reason.value,
            "code": code,
            "source": source,
            "original_name": _display_name(name),
            "key": record.key if record is not None else key_from_name(name),
            "run_id": record.run_id if record is not None else None,
            "attempts": record.attempts if record is not None else None,
            "quarantined_at": self._clock().isoformat().replace("+00:00", "Z"),
        }
        write_atomic(self.paths.quarantine, sidecar_name(target), canonical_json(sidecar))
        move_no_clobber(directory / name, self.paths.quarantine / target)
        key = key_from_name(name)
        if source == "pending" and key is not None:
            append_ledger(self.paths.ledger, removed=[key], durable=True)
        return target

    def _free_quarantine_name(self, name: str) -> str:
        """`name` itself unless quarantine/ already holds an entry there (or one that
        shares its sidecar); then `name.<ns>`. A sidecar whose entry is absent is the
        remainder of a quarantine a crash interrupted, and is overwritten."""
        candidate = name
        while (
            candidate.endswith(SIDECAR_SUFFIX)
            or os.path.lexists(self.paths.quarantine / candidate)
            or any(
                os.path.lexists(self.paths.quarantine / owner)
                for owner in _sidecar_owners(sidecar_name(candidate))
            )
        ):
            candidate = f"{name}.{time.time_ns()}"
        return candidate


def _same_intent(a: OutboxRecord, b: OutboxRecord) -> bool:
    return (a.run_id, a.transaction_id, a.intent_digest, a.attempt) == (
        b.run_id,
        b.transaction_id,
        b.intent_digest,
        b.attempt,
    )


def _delivery_order(record: OutboxRecord) -> tuple[datetime, str]:
    return (record.created_at, record.key)


def _bounded_str(value: object) -> str | None:
    return value[:64] if isinstance(value, str) else None


def _age_order(summary: EntrySummary) -> tuple[bool, datetime, str]:
    created = summary.created_at or datetime.max.replace(tzinfo=UTC)
    return (summary.created_at is None, created, summary.name)


def _sidecar_owners(sidecar: str) -> tuple[str, str]:
    """The two entry names whose sidecar is `sidecar` (`x.json` and `x`)."""
    stem = sidecar[: -len(SIDECAR_SUFFIX)]
    return (stem + ".json", stem)
