"""The outbox's files: reading and writing entries, quarantining them (sidecar first, then
the intact rename), and bringing the ledger up to date with the tree.

`OutboxFiles` is the base of `OutboxStore` (store.py): it holds no state of its own beyond
the attributes the store's constructor sets, declared here. Every method expects the
caller to hold the store lock unless it takes it itself (`_locked`).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path

from ops_contracts import canonical_json
from rein_aharness.outbox.durable import (
    FileVersion,
    file_version,
    is_temp_name,
    move_no_clobber,
    read_bounded,
    unlink_durable,
    write_atomic,
    write_group,
)
from rein_aharness.outbox.errors import (
    OutboxReplacedError,
)
from rein_aharness.outbox.identity import OutboxMarker
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
    EntryState,
    OutboxRecord,
    QuarantineReason,
    RecordProblem,
    encode_record,
    entry_name,
    key_from_name,
    parse_record,
)
from rein_aharness.outbox.store_model import (
    MAX_SIDECAR_BYTES,
    SIDECAR_FORMAT,
    SIDECAR_SUFFIX,
    Retention,
    display_name,
    same_intent,
    sidecar_name,
    sidecar_owners,
)

__all__ = ["OutboxFiles"]

log = logging.getLogger(__name__)


class OutboxFiles:
    """The file layer of one outbox root (see store.py for the transitions)."""

    paths: OutboxPaths
    marker: OutboxMarker
    _clock: Callable[[], datetime]
    _retention: Retention
    _validated_delivered: dict[str, tuple[FileVersion, datetime]]
    _pending_versions: dict[str, tuple[FileVersion, OutboxRecord]]
    _reported_lost: set[str]

    def _write_pending_group(self, records: Sequence[OutboxRecord]) -> None:
        versions = write_group(
            [(self.paths.pending, entry_name(r.key), encode_record(r)) for r in records]
        )
        for record, version in zip(records, versions, strict=True):
            self._pending_versions[record.key] = (version, record)

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
        return OutboxFiles._read_versioned(directory, name, state)[0]

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
            data = read_bounded(path, MAX_SIDECAR_BYTES)
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
            if same_intent(twin, record):
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
        return twin if same_intent(twin, record) else None

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
            "original_name": display_name(name),
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
                for owner in sidecar_owners(sidecar_name(candidate))
            )
        ):
            candidate = f"{name}.{time.time_ns()}"
        return candidate
