"""Keep a claim's lease alive while its run executes; cancel the run when it is lost.

A heartbeat goes out every `lease_seconds / 3`, each asking for a fresh full lease for
the claimed attempt (`attempt`, fencing: it can only extend the attempt this execution
belongs to, never a later claim of the same run by this same identity). The lease is
lost when:

* Activity Core refuses a heartbeat conclusively (`expired_lease`, also for an attempt
  that is no longer current, `wrong_owner`, `state_conflict`, `not_found`): the run is
  no longer this worker's;
* no heartbeat has succeeded for a whole lease (Activity Core unreachable): the lease
  has ended on the server's side even if it never said so.

Either way the keeper cancels the scope it guards (the execution) and records why. Each
heartbeat is counted by its result (ok, failed, refused; metrics.py). The
worker then closes nothing: a close would be refused, and another worker may already
hold the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import QueueError, QueueRefusedError
from rein_aharness.worker.metrics import WorkerMetrics

__all__ = ["LeaseKeeper"]

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(
        self,
        client: ActivityCoreQueueClient,
        *,
        run_id: str,
        attempt: int,
        worker_id: str,
        lease_seconds: int,
        clock: Callable[[], float] = time.monotonic,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self._client = client
        self._run_id = run_id
        self._attempt = attempt
        self._worker_id = worker_id
        self._lease = lease_seconds
        self._clock = clock
        self._metrics = metrics or WorkerMetrics()
        self.interval = lease_seconds / 3
        self.lost: str | None = None
        self.beats = 0
        # The claim was granted just before we start: count the lease from now.
        self._deadline = clock() + lease_seconds

    async def keep(self, guarded: anyio.CancelScope) -> None:
        """Heartbeat until cancelled; on loss, cancel `guarded` and return."""
        while True:
            await anyio.sleep(self.interval)
            sent_at = self._clock()
            try:
                await self._client.heartbeat(
                    self._run_id, self._worker_id, lease_seconds=self._lease, attempt=self._attempt
                )
            except QueueRefusedError as exc:
                self._metrics.heartbeat("refused")
                self._lose(guarded, f"heartbeat refused: {exc.code or exc.status}")
                return
            except QueueError as exc:
                self._metrics.heartbeat("failed")
                if self._clock() >= self._deadline:
                    self._lose(guarded, f"no heartbeat succeeded for a whole lease ({exc})")
                    return
                log.warning(
                    "heartbeat failed, will retry",
                    extra={"run_id": self._run_id, "error": type(exc).__name__},
                )
                continue
            self._metrics.heartbeat("ok")
            self.beats += 1
            self._deadline = sent_at + self._lease

    def _lose(self, guarded: anyio.CancelScope, reason: str) -> None:
        self.lost = reason
        log.warning(
            "lease lost; abandoning the run", extra={"run_id": self._run_id, "reason": reason}
        )
        guarded.cancel()
