"""Fires in flight when the Temporal worker is upgraded: today's `RunActivityWorkflow`
replays a history the previous build recorded (record -> emit, no fire policy, no sink
step), so a fire that was running during a deploy goes on instead of failing its workflow
task with a nondeterminism error.

The history (histories/run_activity_before_durable_fires.json) was recorded from the build
before durable fires: a manual fire of a one-rule definition, emitted."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from activity_core.settings import load_settings
from activity_core.temporal.worker import fire_policy
from activity_core.temporal.workflow import PRE_POLICY_FIRES, RunActivityWorkflow

HISTORY = Path(__file__).parent / "histories" / "run_activity_before_durable_fires.json"


async def test_a_fire_started_by_the_previous_build_replays() -> None:
    history = WorkflowHistory.from_json(
        "activity:pre-durable:manual:0c0ffee0-0000-4000-8000-000000000001",
        HISTORY.read_text(encoding="utf-8"),
    )
    result = await Replayer(workflows=[RunActivityWorkflow]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert result.replay_failure is None, result.replay_failure


def test_fires_of_the_previous_build_run_with_the_default_timing() -> None:
    assert fire_policy(load_settings()) == PRE_POLICY_FIRES
