"""The outbox's read side: what `close-outbox status` shows (a part of OutboxStore).

Reads only: a snapshot takes the store lock for a consistent view and writes nothing.
"""

from __future__ import annotations

import logging

from rein_aharness.outbox.ledger import (
    scan_keys,
)
from rein_aharness.outbox.locking import hold_lock
from rein_aharness.outbox.record import (
    OutboxRecord,
    RecordProblem,
    key_from_name,
)
from rein_aharness.outbox.store_files import OutboxFiles
from rein_aharness.outbox.store_model import (
    EntrySummary,
    OutboxSnapshot,
    StoreState,
    age_order,
    bounded_str,
    display_name,
    sidecar_name,
)

__all__ = ["OutboxStatus"]

log = logging.getLogger(__name__)


class OutboxStatus(OutboxFiles):
    """snapshot: pending, delivered and quarantined entries, and lost keys."""

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
        pending.sort(key=age_order)
        quarantined.sort(key=age_order)
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
            reason = bounded_str(sidecar.get("reason"))
            code = bounded_str(sidecar.get("code"))
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
            name=display_name(name),
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
