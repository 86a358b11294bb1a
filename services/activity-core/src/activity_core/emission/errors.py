"""What can go wrong when a fire emits its tasks, in the vocabulary of the caller.

The Temporal activities map these: a policy error is final (non-retryable), a database
failure is retried, and the idempotent insert makes every retry safe. A sink failure
never fails the emission: the sink write is a step of its own, retried on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DefinitionNotSyncedError",
    "EmissionError",
    "EmissionPolicyError",
    "EmissionUnavailable",
    "IssueSinkError",
    "PolicyProblem",
    "SinkWriteWithdrawn",
]


class EmissionError(Exception):
    """Base of every emission failure."""


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One reason the batch was refused: ``field_path`` as in the definition file."""

    field_path: str
    message: str

    def __str__(self) -> str:
        return f"{self.field_path}: {self.message}"


class EmissionPolicyError(EmissionError):
    """The batch breaks the emission policy; nothing of it was emitted. Non-retryable:
    the same definition and fire would be refused again."""

    def __init__(self, activity_id: str, problems: Sequence[PolicyProblem]) -> None:
        self.activity_id = activity_id
        self.problems = list(problems)
        details = "; ".join(str(p) for p in self.problems)
        super().__init__(f"emission of {activity_id} refused: {details}")


class DefinitionNotSyncedError(EmissionPolicyError):
    """The definition has no row (it was never synced); nothing was emitted."""

    def __init__(self, activity_id: str) -> None:
        super().__init__(
            activity_id, [PolicyProblem("id", "no stored definition; run sync-definitions")]
        )


class IssueSinkError(EmissionError):
    """The IssueSink refused a task or stayed unreachable after its own bounded retries.

    ``conclusive``: the sink refused this task (a 4xx other than 408/429); the same write
    would be refused again, so it is recorded as failed rather than retried. Otherwise the
    sink is down: the write stays pending and is retried later. The ops run (if any) is
    queued either way. ``status`` is the last HTTP status (None for a transport failure).
    """

    def __init__(
        self, message: str, *, status: int | None = None, conclusive: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.conclusive = conclusive


class EmissionUnavailable(EmissionError):
    """PostgreSQL could not be reached mid-emission (or mid sink bookkeeping). Retryable:
    nothing of the transaction it interrupted was committed."""


class SinkWriteWithdrawn(EmissionError):
    """A sink write this try was about to attempt is no longer its to send: the fire's retry
    window ended (``give_up``) or a later try took the write over. Nothing was sent."""

    def __init__(self, idempotency_key: str) -> None:
        super().__init__(f"sink write of {idempotency_key} withdrawn: given up or taken over")
        self.idempotency_key = idempotency_key
