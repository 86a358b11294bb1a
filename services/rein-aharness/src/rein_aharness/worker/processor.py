"""One claimed run, start to close: select, execute under a kept lease, close.

1. `select_execution` decides before anything exists on disk (profiles/selection.py):
   a refusal is closed as failed at once, without executing anything.
2. The profiled request goes to the Glas gateway, the legacy one to the legacy runner,
   each while a `LeaseKeeper` heartbeats, inside a cancel scope whose deadline is the
   lease's (lease.py). A lost lease (a refused heartbeat, or the deadline) cancels the
   execution (its sandbox is killed, the gateway removes its worktree and puts refs
   back), the run's landing branch is withdrawn if it had landed (`withdraw_landing`: a
   result that arrived with the loss is dropped with it), and nothing is closed.
3. The close is decided (decisions.py) and delivered (closer.py), shielded from
   cancellation: once execution has finished, its close is always at least durably
   enqueued, even during shutdown.

Each run is counted once here (metrics.py): its outcome, why it failed (a refusal, or
the class of the gateway error, `_FAILURE_REASONS`), how long its execution and its
close took, and what became of the close.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import anyio

from ops_contracts import CloseAction, GatewayResult, OpsRun
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.gateway import (
    ApproachFailed,
    ApproachTimedOut,
    GatewayError,
    GatewayProtocolError,
    GatewayRefused,
    GatewayUnavailable,
    GlasGateway,
    QueuedRequest,
    RemoteRepositoryNotFound,
    RepositoryCredentialsRefused,
    RepositoryTooLarge,
    RepositoryUnavailable,
    SandboxFailed,
    SecretUnavailable,
    WithdrawLanding,
    WorkRejected,
    transaction_id_for,
)
from rein_aharness.profiles import (
    ClosePath,
    Legacy,
    ProfileCatalogue,
    Profiled,
    Refused,
    select_execution,
)
from rein_aharness.worker.closer import Closer, CloseReport
from rein_aharness.worker.decisions import (
    CloseDecision,
    complete_with,
    decision_for_error,
    decision_for_result,
    refusal,
)
from rein_aharness.worker.lease import LeaseKeeper
from rein_aharness.worker.legacy import LegacyRunner
from rein_aharness.worker.metrics import FailureReason, RunOutcome, WorkerMetrics

__all__ = ["RunProcessor", "RunReport"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Most specific first: ApproachTimedOut is an ApproachFailed. A bare GatewayError is the
# processor's own wrapping of an unexpected exception (`_leased`).
_FAILURE_REASONS: tuple[tuple[type[GatewayError], FailureReason], ...] = (
    (ApproachTimedOut, "approach_timed_out"),
    (ApproachFailed, "approach_failed"),
    (SandboxFailed, "sandbox_failed"),
    (WorkRejected, "work_rejected"),
    (SecretUnavailable, "secret_unavailable"),
    (GatewayRefused, "gateway_refused"),
    (GatewayUnavailable, "gateway_unavailable"),
    (GatewayProtocolError, "gateway_protocol_error"),
    (RepositoryUnavailable, "repository_unavailable"),
    (RepositoryCredentialsRefused, "repository_credentials_refused"),
    (RemoteRepositoryNotFound, "repository_not_found"),
    (RepositoryTooLarge, "repository_too_large"),
)


@dataclass(frozen=True)
class RunReport:
    run_id: str
    selection: str  # "profiled", "legacy" or "refused"
    close: CloseReport | None  # None when the lease was lost: nothing was closed
    lease_lost: str | None = None


@dataclass(frozen=True)
class _Executed(Generic[T]):
    value: T | None = None
    error: GatewayError | None = None


class RunProcessor:
    def __init__(
        self,
        *,
        client: ActivityCoreQueueClient,
        catalogue: ProfileCatalogue,
        gateway: GlasGateway,
        legacy: LegacyRunner,
        closer: Closer,
        worker_id: str,
        lease_seconds: int,
        allow_unsandboxed: bool = False,
        metrics: WorkerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        withdraw_landing: WithdrawLanding | None = None,
    ) -> None:
        self._client = client
        self._catalogue = catalogue
        self._gateway = gateway
        self._legacy = legacy
        self._closer = closer
        self._worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._allow_unsandboxed = allow_unsandboxed
        self._metrics = metrics or WorkerMetrics()
        self._clock = clock
        self._withdraw = withdraw_landing

    async def process(self, run: OpsRun, *, claim_sent_at: float | None = None) -> RunReport:
        """`claim_sent_at`: when the claim that won `run` was sent (`anyio.current_time()`;
        default now), the moment its lease is counted from (lease.py)."""
        run_id = str(run.id)
        selection = select_execution(
            run, self._catalogue, allow_unsandboxed=self._allow_unsandboxed
        )
        if isinstance(selection, Refused):
            log.info(
                "run refused before execution", extra={"run_id": run_id, "reason": selection.reason}
            )
            self._metrics.execution_failed("refused_before_execution")
            self._metrics.run_ended("refused")
            close = await self._close(run, selection.close_path, refusal(selection.reason))
            return RunReport(run_id, "refused", close)

        if isinstance(selection, Profiled):
            log.info(
                "profile resolved",
                extra={"run_id": run_id, "attempt": run.attempt, "profile": selection.profile.ref},
            )
            request = QueuedRequest(run, selection.profile, selection.grant, selection.sandbox)
            executed, lost = await self._leased(
                run, "profiled", lambda: self._gateway.execute(request), claim_sent_at
            )
            if lost is not None:
                if self._withdraw is not None:
                    await self._withdraw(run.target_repo, run_id, run.attempt)
                self._metrics.run_ended("lease_lost")
                return RunReport(run_id, "profiled", None, lease_lost=lost)
            if executed.error is not None:
                self._metrics.execution_failed(_failure_reason(executed.error))
            elif executed.value is not None and not executed.value.ok:
                self._metrics.execution_failed("glas_outcome")
            decision = _profiled_decision(executed)
            self._metrics.run_ended(_outcome_of(decision))
            return RunReport(run_id, "profiled", await self._close(run, ClosePath.outbox, decision))

        assert isinstance(selection, Legacy)
        legacy: Legacy = selection
        executed_legacy, lost = await self._leased(
            run, "legacy", lambda: self._legacy.execute(run, legacy), claim_sent_at
        )
        if lost is not None:
            self._metrics.run_ended("lease_lost")
            return RunReport(run_id, "legacy", None, lease_lost=lost)
        if executed_legacy.error is not None:
            self._metrics.execution_failed(_failure_reason(executed_legacy.error))
            decision = decision_for_error(executed_legacy.error)
        else:
            assert executed_legacy.value is not None
            decision = complete_with(executed_legacy.value)
        self._metrics.run_ended(_outcome_of(decision))
        return RunReport(run_id, "legacy", await self._close(run, ClosePath.direct, decision))

    async def _close(self, run: OpsRun, path: ClosePath, decision: CloseDecision) -> CloseReport:
        started = self._clock()
        with anyio.CancelScope(shield=True):
            if path is ClosePath.direct:
                report = await self._closer.close_directly(run, decision)
            else:
                report = await self._closer.close_through_outbox(
                    run, transaction_id_for(run), decision
                )
            result = report.disposition.value if report.disposition else report.state
            self._metrics.closed(report.path, result, self._clock() - started)
        log.info(
            "run closed",
            extra={
                "run_id": report.run_id,
                "action": decision.action.value,
                "close_path": report.path,
                "close_state": report.state,
                "disposition": report.disposition.value if report.disposition else None,
            },
        )
        return report

    async def _leased(
        self,
        run: OpsRun,
        selection: Literal["profiled", "legacy"],
        work: Callable[[], Awaitable[T]],
        claim_sent_at: float | None,
    ) -> tuple[_Executed[T], str | None]:
        """Run `work` while heartbeating; (its outcome, None) or (empty, why the lease was
        lost). `work` is cancelled at the lease's deadline even while a heartbeat is in
        flight; an outcome that arrived with a lost lease is dropped."""
        keeper = LeaseKeeper(
            self._client,
            run_id=str(run.id),
            attempt=run.attempt,
            worker_id=self._worker_id,
            lease_seconds=self._lease_seconds,
            granted_from=claim_sent_at,
            metrics=self._metrics,
        )
        if not await keeper.confirm():
            assert keeper.lost is not None
            return _Executed(), keeper.lost
        started = self._clock()
        box: list[_Executed[T]] = []
        with anyio.CancelScope() as guarded:
            keeper.guard(guarded)
            async with anyio.create_task_group() as tasks:

                async def execute() -> None:
                    try:
                        box.append(_Executed(value=await work()))
                    except GatewayError as exc:
                        box.append(_Executed(error=exc))
                    except Exception as exc:
                        log.exception(
                            "execution failed unexpectedly", extra={"run_id": str(run.id)}
                        )
                        box.append(
                            _Executed(
                                error=GatewayError(
                                    f"internal error during execution: {type(exc).__name__}",
                                    reopen=True,
                                )
                            )
                        )
                    finally:
                        tasks.cancel_scope.cancel()

                tasks.start_soon(keeper.keep, guarded)
                tasks.start_soon(execute)
        self._metrics.executed(selection, self._clock() - started)
        if not box:
            # Only the lease's deadline ends the scope without an outcome (a shutdown's
            # cancellation propagates from the `with` above).
            keeper.deadline_passed()
        if keeper.lost is not None:
            return _Executed(), keeper.lost
        assert box, "execution ended without an outcome"
        return box[0], None


def _failure_reason(error: GatewayError) -> FailureReason:
    for kind, reason in _FAILURE_REASONS:
        if isinstance(error, kind):
            return reason
    return "internal_error"


def _outcome_of(decision: CloseDecision) -> RunOutcome:
    if decision.action is CloseAction.complete:
        return "completed"
    return "failed_reopen" if decision.reopen else "failed"


def _profiled_decision(executed: _Executed[GatewayResult]) -> CloseDecision:
    if executed.error is not None:
        return decision_for_error(executed.error)
    assert executed.value is not None
    return decision_for_result(executed.value)
