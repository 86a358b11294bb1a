"""What the outbox refuses, and the one exception a delivery callback raises on purpose."""

from __future__ import annotations

from collections.abc import Iterable

from ops_contracts import CONCLUSIVE_CHANGES_REFUSALS, RefusalCode

__all__ = [
    "ConclusiveRefusalError",
    "EntryUndeliverable",
    "InvalidCloseIntentError",
    "OutboxConflictError",
    "OutboxError",
    "OutboxIntegrityError",
    "OutboxPathError",
    "OutboxReplacedError",
    "OutboxUntrustedError",
]


class OutboxError(Exception):
    """Base of every error the outbox raises itself."""


class OutboxPathError(OutboxError):
    """The state tree cannot be created, or is not the private tree it must be."""


class OutboxUntrustedError(OutboxPathError):
    """A directory on the way to the outbox, or of the outbox, could be changed by
    someone other than the worker (see trust.py); the message names it and why."""


class OutboxIntegrityError(OutboxError):
    """The outbox does not hold what it remembers holding.

    `lost` are the keys of entries it knew pending that are in none of pending/,
    delivered/ and quarantine/ (empty for OutboxReplacedError).
    """

    def __init__(self, message: str, lost: Iterable[str] = ()) -> None:
        self.lost: tuple[str, ...] = tuple(lost)
        super().__init__(message)


class OutboxReplacedError(OutboxIntegrityError):
    """close-outbox/ is not the outbox its state directory recorded: gone, without its
    identity marker or ledger, or another outbox's (see identity.py)."""


class InvalidCloseIntentError(OutboxError):
    """The close intent is not a bounded v1 intent; nothing was written.

    `problems` are short, fixed descriptions with JSON paths (`$.result.x: string too
    long`), never the offending values.
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)[:20]
        super().__init__("invalid close intent: " + "; ".join(self.problems))


class OutboxConflictError(OutboxError):
    """The entry key is already used by a different intent; the new one is refused.

    `fields` names what differs (`worker_id`, `action`, `result`, `error`, `reopen`,
    `attempt`); no value is repeated in the message.
    """

    def __init__(self, key: str, state: str, fields: Iterable[str]) -> None:
        self.key = key
        self.state = state
        self.fields: tuple[str, ...] = tuple(fields)
        super().__init__(
            f"close outbox entry {key} ({state}) already holds a different intent: "
            f"{', '.join(self.fields)} differ"
        )


class ConclusiveRefusalError(Exception):
    """Raised by a delivery callback when the queue refused the close conclusively: the
    entry is quarantined with the code, never delivered again.

    Only the six conclusive close codes, and the conclusive refusals of a changes upload
    (`changes_invalid`, `changes_conflict`, `changes_too_large`: the same bytes are
    refused again), are accepted: a refusal that retrying might overcome (auth,
    validation, 5xx, `changes_not_stored`) is not this error, and stays pending. What the
    refusal looked like on the wire is the adapter's business
    (rein_aharness.adapters.queue_errors.CloseRefusedError).
    """

    def __init__(self, code: RefusalCode) -> None:
        if code not in CONCLUSIVE_CHANGES_REFUSALS:
            raise ValueError(f"{code!s} is not a conclusive close refusal")
        self.code = RefusalCode(code)
        super().__init__(f"close refused: {self.code.value}")


class EntryUndeliverable(Exception):
    """Raised by a delivery callback when the entry can never be delivered for a local
    reason (its changes bundle is gone and cannot be written again with the recorded
    digest): the entry is quarantined with `reason` (a QuarantineReason value)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"close undeliverable: {reason}")
