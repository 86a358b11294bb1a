"""The Temporal worker's readiness verdict (worker_readiness.py), without a server: which
poller records count as this worker polling, and what the probe's thread answers from the
last verdict. The real worker on a real dev server: test_ac_temporal_worker_probes.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.taskqueue.v1 import PollerInfo

from activity_core.temporal.worker_readiness import (
    STALE_AFTER_SECONDS,
    PollerReadiness,
    poller_age,
)

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def _poller(identity: str, seconds_ago: float | None) -> PollerInfo:
    if seconds_ago is None:
        return PollerInfo(identity=identity)
    seen = Timestamp()
    seen.FromDatetime(NOW - timedelta(seconds=seconds_ago))
    return PollerInfo(identity=identity, last_access_time=seen)


def test_only_this_workers_identity_counts_and_its_freshest_record() -> None:
    pollers = [_poller("7@other-pod", 1), _poller("1@this-pod", 40), _poller("1@this-pod", 12)]
    assert poller_age(pollers, "1@this-pod", NOW) == 12
    assert poller_age(pollers, "1@missing-pod", NOW) is None
    assert poller_age([], "1@this-pod", NOW) is None
    # a record without a time says nothing about when the poller was seen
    assert poller_age([_poller("1@this-pod", None)], "1@this-pod", NOW) is None


def test_the_probe_answers_the_last_verdict_and_unready_until_the_first() -> None:
    readiness = PollerReadiness(task_queue="q", namespace="default")
    assert readiness() == (
        False,
        {"status": "not_connected", "task_queue": "q", "namespace": "default"},
    )
    readiness.record(True, "ready", identity="1@pod", seconds_since_poll={"workflow": 3.0})
    ready, body = readiness()
    assert ready and body["status"] == "ready" and body["identity"] == "1@pod"
    readiness.stopping()
    assert readiness() == (
        False,
        {"status": "stopping", "task_queue": "q", "namespace": "default"},
    )


def test_a_verdict_nobody_renewed_is_unready() -> None:
    now = [100.0]
    readiness = PollerReadiness(task_queue="q", namespace="default", clock=lambda: now[0])
    readiness.record(True, "ready", identity="1@pod")
    now[0] += STALE_AFTER_SECONDS - 0.5
    assert readiness()[0]
    now[0] += 1
    ready, body = readiness()
    assert not ready
    assert body["status"] == "check_stale"
    assert body["seconds_since_check"] > STALE_AFTER_SECONDS
