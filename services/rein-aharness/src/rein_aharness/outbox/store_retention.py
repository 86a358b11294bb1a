"""The retention of delivered/, and what it costs.

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
"""

from __future__ import annotations

import logging
import os
from datetime import datetime

from rein_aharness.outbox.durable import (
    FileVersion,
    file_version,
    fsync_dir,
)
from rein_aharness.outbox.ledger import (
    append_ledger,
)
from rein_aharness.outbox.record import (
    RecordProblem,
    key_from_name,
)
from rein_aharness.outbox.store_files import OutboxFiles

__all__ = ["DeliveredRetention"]

log = logging.getLogger(__name__)


class DeliveredRetention(OutboxFiles):
    """prune_delivered: the delivered/ retention (a part of OutboxStore)."""

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
