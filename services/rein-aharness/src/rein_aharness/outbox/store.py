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

Retention, and what a pruned identity loses: store_retention.py. The read side (status):
store_status.py; the files, the ledger's reconciliation and quarantine: store_files.py; the
shapes they return: store_model.py.

Names starting with `.tmp-` are reserved for temp files. They are written only under
`store.lock`, so one found while holding it is a crash leftover and is removed.

Opening a store checks that its directories deserve trust (trust.py) and that it is the
outbox its state directory recorded (identity.py); with `verify` (the default, and what
the worker uses) it also refuses an outbox that lost entries it knew pending
(OutboxIntegrityError). Every replay pass brings the ledger up to date and logs a lost
entry once; `snapshot` reports them (`lost`) without writing anything.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ops_contracts import CloseAction, RefusalCode
from rein_aharness.outbox.durable import (
    FileVersion,
    file_version,
    fsync_dir,
    unlink_durable,
    write_group,
)
from rein_aharness.outbox.errors import (
    OutboxConflictError,
    OutboxIntegrityError,
)
from rein_aharness.outbox.identity import OutboxMarker, open_outbox
from rein_aharness.outbox.intent import PreparedClose, prepare_close
from rein_aharness.outbox.ledger import (
    append_ledger,
)
from rein_aharness.outbox.paths import OutboxPaths
from rein_aharness.outbox.record import (
    DeliveryFailure,
    OutboxRecord,
    QuarantineReason,
    RecordProblem,
    Settlement,
    encode_record,
    entry_name,
)
from rein_aharness.outbox.store_model import (
    SIDECAR_FORMAT,
    SIDECAR_SUFFIX,
    EnqueueResult,
    EntrySummary,
    OutboxSnapshot,
    ReplayPlan,
    Retention,
    StoreState,
    delivery_order,
    sidecar_name,
    utc_now,
)
from rein_aharness.outbox.store_retention import DeliveredRetention
from rein_aharness.outbox.store_status import OutboxStatus

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


class OutboxStore(OutboxStatus, DeliveredRetention):
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
        clock: Callable[[], datetime] = utc_now,
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
        deliverable.sort(key=delivery_order)
        foreign.sort(key=delivery_order)
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
