"""Keep a claim's lease alive while its run executes; cancel the run when it is lost.

The deadline. Activity Core counts a lease from its own clock (PostgreSQL's `now()` in
the claim's or heartbeat's transaction), which starts after the request left the worker;
it may reopen the run once `lease_until <= now()` and another worker may claim it. So the
worker counts each lease from the moment it *sent* the request that won it (the claim,
then each successful heartbeat) and stops `lease_margin(lease_seconds)` earlier: the
execution runs inside a cancel scope whose deadline is that moment, moved forward by each
successful heartbeat only. The deadline is a timer of its own: it ends the execution (the
sandbox is killed, the worktree removed) at the deadline whatever a heartbeat in flight
is doing, and it bounds every heartbeat, all its tries and backoff included, since the
heartbeat runs inside the same scope.

Why the margin (5% of the lease, at least 0.5 s, at most 30 s): counting from the send
already covers the request's travel and any offset between the two clocks (only
durations are compared). What remains is (a) the rate difference of the two clocks, at
most 500 ppm for NTP-disciplined clocks (0.45 s over the default 900 s lease), (b) a
small step of the database host's wall clock (`now()`), and (c) the time from the
deadline to the sandbox being dead and the run's branch removed on a loaded host (a
SIGKILL and a reap, a few git commands). 5% of 900 s is 45 s, capped to 30 s: far more
than (a)-(c) need, and it costs nothing while heartbeats succeed. The floor keeps a
short test lease (3 s: 2.5 s) from having no margin at all.

Counting from the claim's sending is pessimistic for a long-poll claim (granted when a
run appeared, up to `wait_seconds` after the sending): when less than a third of the
lease is left by that count, `confirm` renews the lease before anything executes
(bounded by a third of the lease; nothing runs meanwhile, so no bound is at stake), and
the run is abandoned unexecuted if that fails.

A heartbeat goes out every `lease_seconds / 3` (sooner when less than twice that is
left before the deadline, so a failed one is retried while the lease still lasts), each
asking for a fresh full lease for the claimed attempt (`attempt`, fencing: it can only
extend the attempt this execution belongs to, never a later claim of the same run by
this same identity). The lease is lost when:

* Activity Core refuses a heartbeat conclusively (`expired_lease`, also for an attempt
  that is no longer current, `wrong_owner`, `state_conflict` (an operator cancelled the
  run), `not_found`): the run is no longer this worker's; the keeper cancels the scope;
* the deadline passes (no heartbeat succeeded in time: Activity Core unreachable, or a
  heartbeat held unanswered): the scope cancels itself (`deadline_passed`).

Each heartbeat is counted by its result (ok, failed, refused; one cut short by the
deadline counts as failed; metrics.py). The worker then closes nothing: a close would be
refused, and another worker may already hold the run.
"""

from __future__ import annotations

import logging

import anyio

from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import QueueError, QueueRefusedError
from rein_aharness.worker.metrics import WorkerMetrics

__all__ = ["LeaseKeeper", "lease_margin"]

log = logging.getLogger(__name__)

MARGIN_FRACTION = 0.05
MIN_MARGIN_SECONDS = 0.5
MAX_MARGIN_SECONDS = 30.0
# The shortest pause between two heartbeats near the deadline (no busy loop when every
# try fails at once).
_MIN_PAUSE_SECONDS = 0.05

DEADLINE_PASSED = "the lease's deadline passed: no heartbeat succeeded in time"
NOT_CONFIRMED = "the claim's lease could not be renewed before execution"


def lease_margin(lease_seconds: float) -> float:
    """How long before the server may reopen the run the worker stops (see above)."""
    return min(MAX_MARGIN_SECONDS, max(MIN_MARGIN_SECONDS, lease_seconds * MARGIN_FRACTION))


class LeaseKeeper:
    """`keep(guarded)` heartbeats and holds `guarded.deadline` at the lease's deadline.

    Times are anyio's clock (`anyio.current_time()`), the clock cancel scopes use.
    `granted_from`: when the request that won the claim was sent (default: now).
    """

    def __init__(
        self,
        client: ActivityCoreQueueClient,
        *,
        run_id: str,
        attempt: int,
        worker_id: str,
        lease_seconds: int,
        granted_from: float | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self._client = client
        self._run_id = run_id
        self._attempt = attempt
        self._worker_id = worker_id
        self._lease = lease_seconds
        self._metrics = metrics or WorkerMetrics()
        self.interval = lease_seconds / 3
        self.margin = lease_margin(lease_seconds)
        self.lost: str | None = None
        self.beats = 0
        start = anyio.current_time() if granted_from is None else granted_from
        self.deadline = start + lease_seconds - self.margin

    async def confirm(self) -> bool:
        """True when the execution may start: at least a third of the lease is left, or
        a heartbeat sent now renewed it. Otherwise the lease is lost (`lost`)."""
        if self.deadline - anyio.current_time() >= self.interval:
            return True
        sent_at = anyio.current_time()
        with anyio.move_on_after(self.interval):
            try:
                await self._client.heartbeat(
                    self._run_id, self._worker_id, lease_seconds=self._lease, attempt=self._attempt
                )
            except QueueRefusedError as exc:
                self._metrics.heartbeat("refused")
                self._record_loss(f"heartbeat refused: {exc.code or exc.status}")
                return False
            except QueueError as exc:
                self._metrics.heartbeat("failed")
                self._record_loss(f"{NOT_CONFIRMED} ({type(exc).__name__})")
                return False
            self._metrics.heartbeat("ok")
            self.beats += 1
            self.deadline = sent_at + self._lease - self.margin
            return True
        self._metrics.heartbeat("failed")
        self._record_loss(NOT_CONFIRMED)
        return False

    def guard(self, guarded: anyio.CancelScope) -> None:
        """Give `guarded` the lease's deadline (before anything runs in it)."""
        guarded.deadline = self.deadline

    def deadline_passed(self) -> None:
        """Record that the scope ended at the deadline (the processor calls this)."""
        if self.lost is None:
            self._record_loss(DEADLINE_PASSED)

    async def keep(self, guarded: anyio.CancelScope) -> None:
        """Heartbeat until cancelled; on a refusal, cancel `guarded` and return."""
        self.guard(guarded)
        while True:
            left = self.deadline - anyio.current_time()
            await anyio.sleep(min(self.interval, max(left / 2, _MIN_PAUSE_SECONDS)))
            sent_at = anyio.current_time()
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
                log.warning(
                    "heartbeat failed, will retry before the lease's deadline",
                    extra={"run_id": self._run_id, "error": type(exc).__name__},
                )
                continue
            except anyio.get_cancelled_exc_class():
                if anyio.current_time() >= self.deadline:
                    self._metrics.heartbeat("failed")  # cut short by the deadline
                raise
            self._metrics.heartbeat("ok")
            self.beats += 1
            self.deadline = sent_at + self._lease - self.margin
            guarded.deadline = self.deadline

    def _lose(self, guarded: anyio.CancelScope, reason: str) -> None:
        self._record_loss(reason)
        guarded.cancel()

    def _record_loss(self, reason: str) -> None:
        self.lost = reason
        log.warning(
            "lease lost; abandoning the run", extra={"run_id": self._run_id, "reason": reason}
        )
