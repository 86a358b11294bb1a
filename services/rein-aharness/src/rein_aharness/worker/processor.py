"""One claimed run, start to close: select, execute under a kept lease, close.

1. `select_execution` decides before anything exists on disk (profiles/selection.py):
   a refusal is closed as failed at once, without executing anything.
2. The profiled request goes to the Glas gateway, the legacy one to the legacy runner,
   each while a `LeaseKeeper` heartbeats. A lost lease cancels the execution (the
   gateway removes its worktree and puts refs back) and nothing is closed.
3. The close is decided (decisions.py) and delivered (closer.py), shielded from
   cancellation: once execution has finished, its close is always at least durably
   enqueued, even during shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

from ops_contracts import GatewayResult, OpsRun
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.gateway import GatewayError, GlasGateway, QueuedRequest, transaction_id_for
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

__all__ = ["RunProcessor", "RunReport"]

log = logging.getLogger(__name__)

T = TypeVar("T")


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
    ) -> None:
        self._client = client
        self._catalogue = catalogue
        self._gateway = gateway
        self._legacy = legacy
        self._closer = closer
        self._worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._allow_unsandboxed = allow_unsandboxed

    async def process(self, run: OpsRun) -> RunReport:
        run_id = str(run.id)
        selection = select_execution(
            run, self._catalogue, allow_unsandboxed=self._allow_unsandboxed
        )
        if isinstance(selection, Refused):
            log.info(
                "run refused before execution", extra={"run_id": run_id, "reason": selection.reason}
            )
            close = await self._close(run, selection.close_path, refusal(selection.reason))
            return RunReport(run_id, "refused", close)

        if isinstance(selection, Profiled):
            request = QueuedRequest(run, selection.profile, selection.grant, selection.sandbox)
            executed, lost = await self._leased(run, lambda: self._gateway.execute(request))
            if lost is not None:
                return RunReport(run_id, "profiled", None, lease_lost=lost)
            decision = _profiled_decision(executed)
            return RunReport(run_id, "profiled", await self._close(run, ClosePath.outbox, decision))

        assert isinstance(selection, Legacy)
        legacy: Legacy = selection
        executed_legacy, lost = await self._leased(run, lambda: self._legacy.execute(run, legacy))
        if lost is not None:
            return RunReport(run_id, "legacy", None, lease_lost=lost)
        if executed_legacy.error is not None:
            decision = decision_for_error(executed_legacy.error)
        else:
            assert executed_legacy.value is not None
            decision = complete_with(executed_legacy.value)
        return RunReport(run_id, "legacy", await self._close(run, ClosePath.direct, decision))

    async def _close(self, run: OpsRun, path: ClosePath, decision: CloseDecision) -> CloseReport:
        with anyio.CancelScope(shield=True):
            if path is ClosePath.direct:
                report = await self._closer.close_directly(run, decision)
            else:
                report = await self._closer.close_through_outbox(
                    run, transaction_id_for(run), decision
                )
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
        self, run: OpsRun, work: Callable[[], Awaitable[T]]
    ) -> tuple[_Executed[T], str | None]:
        """Run `work` while heartbeating; (its outcome, None) or (empty, why the lease was lost)."""
        keeper = LeaseKeeper(
            self._client,
            run_id=str(run.id),
            attempt=run.attempt,
            worker_id=self._worker_id,
            lease_seconds=self._lease_seconds,
        )
        box: list[_Executed[T]] = []
        with anyio.CancelScope() as guarded:
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
        if keeper.lost is not None:
            return _Executed(), keeper.lost
        assert box, "execution ended without an outcome"
        return box[0], None


def _profiled_decision(executed: _Executed[GatewayResult]) -> CloseDecision:
    if executed.error is not None:
        return decision_for_error(executed.error)
    assert executed.value is not None
    return decision_for_result(executed.value)
