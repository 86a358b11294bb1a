"""The pure parts of the Temporal context: a fire's context and the desired schedule."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from ac_temporal_kit import definition
from activity_core.temporal.fire_context import fire_context
from activity_core.temporal.payloads import RunActivityInput
from activity_core.temporal.schedules import DesiredSchedule, desired_schedule, schedule_id

FIRE_TIME = datetime(2026, 1, 5, 5, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def test_a_manual_fire_hands_its_request_to_the_templates() -> None:
    params = RunActivityInput("brief", "manual:1", request={"correlation_id": "c-1"})
    assert fire_context(params, None) == {"request": {"correlation_id": "c-1"}}


def test_a_scheduled_fire_hands_its_nominal_time() -> None:
    params = RunActivityInput("brief", "scheduled")
    assert fire_context(params, FIRE_TIME) == {
        "schedule": {"scheduled_for": "2026-01-05T05:00:00+00:00"}
    }
    assert fire_context(params, None) == {"schedule": {}}


def test_the_desired_schedule_follows_the_definition() -> None:
    assert (
        desired_schedule(definition("brief", cron=None), task_queue="q", catchup_window=DAY) is None
    )
    desired = desired_schedule(
        definition("brief", cron="0 6 * * 1-5", timezone="Europe/Berlin", paused=True),
        task_queue="q",
        catchup_window=DAY,
    )
    assert desired == DesiredSchedule("brief", "0 6 * * 1-5", "Europe/Berlin", "q", True, DAY)
    assert desired.schedule_id == schedule_id("brief") == "activity:brief"


def test_the_applied_digest_changes_with_what_the_schedule_does() -> None:
    base = DesiredSchedule("brief", "0 6 * * 1-5", "Europe/Berlin", "q", False, DAY)
    digest = base.applied["digest"]
    assert replace(base, paused=True).applied["digest"] == digest  # pausing is not an update
    for changed in (
        replace(base, cron="0 7 * * 1-5"),
        replace(base, timezone="UTC"),
        replace(base, task_queue="other"),
        replace(base, catchup_window=timedelta(hours=6)),
    ):
        assert changed.applied["digest"] != digest


def test_the_action_carries_no_execution_timeout_and_the_digest_says_so() -> None:
    # schedules of older builds carried a one-hour execution timeout that ended a fire
    # waiting for its worker: their digest differs, so the next sync rewrites them
    desired = DesiredSchedule("brief", "0 6 * * 1-5", "Europe/Berlin", "q", False, DAY)
    assert desired.applied["execution_timeout"] is None
    assert "execution_timeout_seconds" not in desired.applied
    schedule = desired.to_schedule()
    assert schedule.action.execution_timeout is None  # type: ignore[attr-defined]
    assert schedule.policy.catchup_window == DAY
