"""What can go wrong when a fire emits its tasks, in the vocabulary of the caller.

The Temporal emit activity maps these: a policy error is final (non-retryable), a sink or
database failure is retried, and the idempotent insert makes every retry safe.
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
    """The IssueSink refused or stayed unreachable after bounded retries. Retryable: the
    ops run (if any) is already queued and a retry of the emission will not duplicate it.
    ``status`` is the last HTTP status (None for a transport failure); a 4xx is conclusive
    and was not retried here."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class EmissionUnavailable(EmissionError):
    """PostgreSQL could not be reached mid-emission. Retryable, like a sink failure."""
