"""The durable close-evidence outbox (see close-evidence-outbox.md).

One bounded Activity Core completion or failure intent per run and repository
transaction, kept on local disk until the queue has accepted it, in directories only the
worker can change (trust.py), under an identity its state directory records
(identity.py), with a ledger of what it holds (ledger.py).
"""

from rein_aharness.outbox.errors import (
    ConclusiveRefusalError,
    EntryUndeliverable,
    InvalidCloseIntentError,
    OutboxConflictError,
    OutboxError,
    OutboxIntegrityError,
    OutboxPathError,
    OutboxReplacedError,
    OutboxUntrustedError,
)
from rein_aharness.outbox.identity import Adoption, OutboxMarker, adopt_outbox
from rein_aharness.outbox.intent import KEY_DOMAIN, PreparedClose, entry_key, prepare_close
from rein_aharness.outbox.paths import OutboxPaths, default_state_dir, resolve_outbox_root
from rein_aharness.outbox.record import (
    CANCELLED,
    FAILURE_MARKER,
    OutboxRecord,
    QuarantineReason,
    Settlement,
)
from rein_aharness.outbox.replay import DeliveryCallback, EntryOutcome, ReplayReport, replay_pending
from rein_aharness.outbox.store import (
    EnqueueResult,
    EntrySummary,
    OutboxSnapshot,
    OutboxStore,
    Retention,
)

__all__ = [
    "CANCELLED",
    "FAILURE_MARKER",
    "KEY_DOMAIN",
    "Adoption",
    "ConclusiveRefusalError",
    "DeliveryCallback",
    "EnqueueResult",
    "EntryOutcome",
    "EntrySummary",
    "EntryUndeliverable",
    "InvalidCloseIntentError",
    "OutboxConflictError",
    "OutboxError",
    "OutboxIntegrityError",
    "OutboxMarker",
    "OutboxPathError",
    "OutboxPaths",
    "OutboxRecord",
    "OutboxReplacedError",
    "OutboxSnapshot",
    "OutboxStore",
    "OutboxUntrustedError",
    "PreparedClose",
    "QuarantineReason",
    "ReplayReport",
    "Retention",
    "Settlement",
    "adopt_outbox",
    "default_state_dir",
    "entry_key",
    "prepare_close",
    "replay_pending",
    "resolve_outbox_root",
]
