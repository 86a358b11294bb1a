"""The Temporal worker's readiness: `GET /readyz` on its liveness address
(ACTIVITY_CORE_TEMPORAL_WORKER_LIVENESS_ADDRESS), 200 only while the worker is connected
to Temporal and its pollers are polling the task queue, 503 otherwise.

How "polling" is known: the worker's own view cannot tell (the SDK's core retries a
failed poll on its threads and reports nothing to Python), so the Temporal server is
asked. Every CHECK_INTERVAL_SECONDS a task on the worker's event loop calls
DescribeTaskQueue for the task queue's workflow and activity types; the server lists the
pollers it has seen, each with its identity and the last time one of its polls arrived.
Ready = both calls answered (so the connection and the namespace work) and both list a
poller with this worker's identity seen within POLLER_SEEN_WITHIN_SECONDS.

Why that window: the server records a poller when a long poll arrives, and a long poll
with no task to hand out is held for up to a minute (the server's
`matching.longPollExpirationInterval`, one minute by default; seen here: the age of an
idle worker's record climbs to about 50 s, then the next poll resets it). So a healthy,
idle worker's record may be a minute old, and 90 s covers that with a margin. A worker
that stopped polling while Temporal still answers is therefore unready within about
90 s; one whose Temporal is gone is unready at the next check, when the call fails.

The probe's HTTP thread only reads the last verdict (ops_runtime.liveness says why it must
not wait on the loop). A verdict older than STALE_AFTER_SECONDS counts as unready: the
loop that makes them is not running (the liveness probe says so too).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import PollerInfo, TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

__all__ = [
    "CHECK_INTERVAL_SECONDS",
    "POLLER_SEEN_WITHIN_SECONDS",
    "STALE_AFTER_SECONDS",
    "PollerReadiness",
    "poller_age",
    "watch_pollers",
]

CHECK_INTERVAL_SECONDS = 3.0
POLLER_SEEN_WITHIN_SECONDS = 90.0
_CALL_TIMEOUT = timedelta(seconds=3)
STALE_AFTER_SECONDS = 3 * CHECK_INTERVAL_SECONDS + 2 * _CALL_TIMEOUT.total_seconds()

# the task queue types this worker polls: it hosts workflows and activities
_POLLED = {
    "workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
}


@dataclass(frozen=True)
class _Verdict:
    ready: bool
    body: dict[str, Any]
    at: float  # the clock's reading (time.monotonic)


class PollerReadiness:
    """The last verdict, written on the event loop and read by the probe's thread (one
    reference assignment, so a reader sees one whole verdict or the previous one)."""

    def __init__(
        self, *, task_queue: str, namespace: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._where = {"task_queue": task_queue, "namespace": namespace}
        self._clock = clock
        self._verdict = _Verdict(False, self._body("not_connected"), clock())

    def _body(self, status: str, **extra: Any) -> dict[str, Any]:
        return {"status": status, **self._where, **extra}

    def record(self, ready: bool, status: str, **extra: Any) -> None:
        self._verdict = _Verdict(ready, self._body(status, **extra), self._clock())

    def stopping(self) -> None:
        self.record(False, "stopping")

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        verdict = self._verdict
        age = self._clock() - verdict.at
        if verdict.body["status"] != "not_connected" and age > STALE_AFTER_SECONDS:
            return False, self._body("check_stale", seconds_since_check=round(age, 1))
        return verdict.ready, verdict.body


def poller_age(pollers: Sequence[PollerInfo], identity: str, now: datetime) -> float | None:
    """Seconds since the server last saw a poll from `identity`; None if it lists none."""
    ages = [
        (now - poller.last_access_time.ToDatetime(tzinfo=UTC)).total_seconds()
        for poller in pollers
        if poller.identity == identity and poller.HasField("last_access_time")
    ]
    return max(0.0, min(ages)) if ages else None


async def _check(client: Client, namespace: str, task_queue: str, identity: str) -> dict[str, Any]:
    """{kind: age or None} for each polled type. RPCError when the server does not answer."""
    ages: dict[str, Any] = {}
    for kind, queue_type in _POLLED.items():
        request = DescribeTaskQueueRequest(
            namespace=namespace, task_queue=TaskQueue(name=task_queue), task_queue_type=queue_type
        )
        answer = await client.workflow_service.describe_task_queue(
            request, retry=False, timeout=_CALL_TIMEOUT
        )
        age = poller_age(answer.pollers, identity, datetime.now(UTC))
        ages[kind] = None if age is None else round(age, 1)
    return ages


async def watch_pollers(
    client: Client, *, task_queue: str, identity: str, readiness: PollerReadiness
) -> None:
    """Record a verdict every CHECK_INTERVAL_SECONDS until cancelled."""
    namespace = client.namespace
    while True:
        try:
            ages = await _check(client, namespace, task_queue, identity)
        except (RPCError, RuntimeError, TimeoutError) as exc:
            # RuntimeError: the SDK's core when the connection is gone
            reason = " ".join((exc.message if isinstance(exc, RPCError) else str(exc)).split())
            readiness.record(False, "temporal_unreachable", identity=identity, error=reason[:200])
        else:
            polling = all(
                age is not None and age <= POLLER_SEEN_WITHIN_SECONDS for age in ages.values()
            )
            status = "ready" if polling else "not_polling"
            readiness.record(polling, status, identity=identity, seconds_since_poll=ages)
        await asyncio.sleep(CHECK_INTERVAL_SECONDS)
