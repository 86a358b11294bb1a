"""The worker loop: replay, claim, process; repeat until stopped.

Each turn:

1. **Replay first.** Pending closes are delivered before anything is claimed. If the
   pass is stopped by an outage or an auth failure, nothing is claimed: the loop backs
   off and tries the replay again (`--once`: it returns). Only the worker's own entries
   are sent (closer.py quarantines those recorded under another identity), so an auth
   failure here is this worker's credentials, which a claim would meet as well; and
   were closes refused while claims were not, claiming would only pile up work whose
   closes cannot be delivered. One entry that cannot be delivered (another identity, a
   conclusive refusal, an unclassified rejection) never stops a pass.
2. **Sandbox gate.** While a sandbox the catalogue needs cannot be created
   (sandbox/gate.py), nothing is claimed: the loop backs off, replays and probes again
   (`--once`: it returns).
3. **Claim** one run (labels, labels_mode, lease, long-poll `wait_seconds`). A stop
   request cancels a long-poll in flight; should the queue have granted a claim that
   the cancelled request never saw, its lease simply expires.
4. **Process** it (processor.py). On a stop request the current run gets
   `shutdown_grace_seconds` to finish; after that it is abandoned cleanly: the
   execution is cancelled, its worktree removed, nothing is closed and the lease
   expires. A close that has begun is never cut short.

Every claim request and every turn that claims nothing on purpose (steps 1 and 2) is
counted (metrics.py), and so is a run abandoned at shutdown.

Transport errors and 5xx from Activity Core are retried inside the queue client
(bounded, jittered); the loop adds a back-off between turns. Conclusive refusals are
never retried; a claim refused as invalid (a configuration problem) ends the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

from ops_contracts import LabelsMode, OpsRun
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import (
    QueueAuthError,
    QueueProtocolError,
    QueueTransientError,
)
from rein_aharness.outbox import ReplayReport
from rein_aharness.sandbox import SandboxGate
from rein_aharness.worker.closer import Closer
from rein_aharness.worker.metrics import WorkerMetrics
from rein_aharness.worker.processor import RunProcessor, RunReport

__all__ = ["Worker", "WorkerConfig", "run_watched"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class WorkerConfig:
    worker_id: str
    labels: tuple[str, ...] | None = None
    labels_mode: LabelsMode = LabelsMode.any
    lease_seconds: int = 900
    wait_seconds: int = 20
    shutdown_grace_seconds: float = 25.0
    outage_backoff_seconds: float = 5.0


class Worker:
    def __init__(
        self,
        *,
        config: WorkerConfig,
        client: ActivityCoreQueueClient,
        closer: Closer,
        processor: RunProcessor,
        sandbox_gate: SandboxGate | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics or WorkerMetrics()
        self._gate = sandbox_gate
        self._client = client
        self._closer = closer
        self._processor = processor
        self.reports: list[RunReport] = []

    async def run(self, *, once: bool = False, stop: anyio.Event | None = None) -> None:
        stop = stop or anyio.Event()
        while not stop.is_set():
            replay = await run_watched(self._closer.replay, stop.wait)
            if replay is None:
                return
            self._metrics.replayed(replay)
            if replay.stopped_early:
                log.warning(_why_stopped(replay))
                self._metrics.turn_skipped("replay_stopped")
                if once:
                    return
                await _sleep_unless(stop, self._config.outage_backoff_seconds)
                continue
            if self._gate is not None and not await self._gate.ready():
                self._metrics.turn_skipped("sandbox_unavailable")
                if once:
                    return
                await _sleep_unless(stop, self._config.outage_backoff_seconds)
                continue
            # The lease is counted from the claim's sending (lease.py): it was granted
            # after that, on Activity Core's clock.
            claim_sent_at = anyio.current_time()
            try:
                runs = await run_watched(self._claim, stop.wait)
            except (QueueTransientError, QueueAuthError, QueueProtocolError) as exc:
                log.warning("claim failed: %s", exc)
                self._metrics.claim("error")
                if once:
                    return
                await _sleep_unless(stop, self._config.outage_backoff_seconds)
                continue
            if runs is None:
                return
            self._metrics.claim("claimed" if runs else "empty")
            if runs:
                self.reports.append(await self._process(runs[0], stop, claim_sent_at))
            if once:
                return
            if not runs and self._config.wait_seconds == 0:
                # No long-poll to wait in: do not spin on an empty queue.
                await _sleep_unless(stop, self._config.outage_backoff_seconds)

    async def _claim(self) -> list[OpsRun]:
        config = self._config
        return await self._client.claim(
            config.worker_id,
            labels=list(config.labels) if config.labels else None,
            labels_mode=config.labels_mode,
            limit=1,
            lease_seconds=config.lease_seconds,
            wait_seconds=config.wait_seconds,
        )

    async def _process(self, run: OpsRun, stop: anyio.Event, claim_sent_at: float) -> RunReport:
        log.info("claimed run", extra={"run_id": str(run.id), "attempt": run.attempt})
        box: list[RunReport] = []
        failure: list[Exception] = []
        with anyio.CancelScope() as run_scope:
            async with anyio.create_task_group() as tasks:

                async def abandon_after_grace() -> None:
                    await stop.wait()
                    grace = self._config.shutdown_grace_seconds
                    log.info("stopping: the current run may finish within %s s", grace)
                    await anyio.sleep(grace)
                    log.warning("abandoning the current run; its lease will expire")
                    run_scope.cancel()

                async def process() -> None:
                    try:
                        box.append(await self._processor.process(run, claim_sent_at=claim_sent_at))
                    except Exception as exc:
                        failure.append(exc)
                    finally:
                        tasks.cancel_scope.cancel()

                tasks.start_soon(abandon_after_grace)
                tasks.start_soon(process)
        if failure:
            raise failure[0]
        if box:
            return box[0]
        self._metrics.run_ended("abandoned")
        return RunReport(str(run.id), "abandoned", None, lease_lost="abandoned at shutdown")


def _why_stopped(replay: ReplayReport) -> str:
    last = replay.outcomes[-1].detail if replay.outcomes else None
    if last == QueueAuthError.__name__:
        return (
            "activity-core refused this worker's credentials while replaying closes "
            "(check ACTIVITY_CORE_WORKER_TOKEN and ACTIVITY_CORE_WORKER_ID); not claiming"
        )
    return "activity-core unreachable while replaying closes; not claiming"


async def run_watched(
    call: Callable[[], Awaitable[T]], watch: Callable[[], Awaitable[object]]
) -> T | None:
    """`call()` in this task, cancelled if `watch()` returns first (then None); `watch` is
    cancelled once the call ends. The call's exception propagates as itself, not inside
    the task group's ExceptionGroup (the loop's `stop`, and `run`'s signals, use it)."""
    outcome: list[T] = []
    failure: list[Exception] = []
    async with anyio.create_task_group() as tasks:

        async def watching() -> None:
            await watch()
            tasks.cancel_scope.cancel()

        tasks.start_soon(watching)
        try:
            outcome.append(await call())
        except Exception as exc:
            failure.append(exc)
        finally:
            tasks.cancel_scope.cancel()
    if failure:
        raise failure[0]
    return outcome[0] if outcome else None


async def _sleep_unless(stop: anyio.Event, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        await stop.wait()
