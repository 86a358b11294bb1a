"""The queued request a Glas gateway executes: the claimed run and its resolved profile."""

from __future__ import annotations

from dataclasses import dataclass

from ops_contracts import OpsRun, RepositoryGrantV1
from rein_aharness.outbox.intent import transaction_id_for_attempt
from rein_aharness.profiles import DEFAULT_SANDBOX_CHOICE, HarnessProfile, SandboxChoice

__all__ = ["QueuedRequest", "request_id_for", "transaction_id_for"]


def request_id_for(run: OpsRun) -> str:
    """One Glas request per claim attempt: `<run-id>.<attempt>`."""
    return f"{run.id}.{run.attempt}"


def transaction_id_for(run: OpsRun) -> str:
    """The repository transaction of one claim attempt: `rtx-<run-id>.<attempt>`.

    With the run id it keys the attempt's close-outbox entry, so a later attempt of the
    same run (after a reopen or an expired lease) is a different entry. The outbox owns
    the shape: it derives the attempt from it for records written before the attempt
    was stored (outbox/intent.py).
    """
    return transaction_id_for_attempt(str(run.id), run.attempt)


@dataclass(frozen=True)
class QueuedRequest:
    """What the worker hands a gateway: resolved before any worktree or sandbox exists."""

    run: OpsRun
    profile: HarnessProfile
    grant: RepositoryGrantV1 | None
    sandbox: SandboxChoice = DEFAULT_SANDBOX_CHOICE

    @property
    def run_id(self) -> str:
        return str(self.run.id)

    @property
    def request_id(self) -> str:
        return request_id_for(self.run)

    @property
    def transaction_id(self) -> str:
        return transaction_id_for(self.run)
