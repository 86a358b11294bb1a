"""Temporal test support: a scripted IssueSink, definitions, and a per-test harness (a task
queue, a worker and a pool on the test's own database)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import asyncpg
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from ac_testkit import AppClient, settings_env
from activity_core.db.pool import create_pool
from activity_core.definitions.model import ActivityDefinitionSpec
from activity_core.definitions.sync import sync_definitions
from activity_core.emission.errors import IssueSinkError
from activity_core.emission.sink import SinkTask, StillOwed
from activity_core.settings import ActivityCoreSettings, load_settings
from activity_core.temporal.activities import ActivityCoreActivities
from activity_core.temporal.client import TemporalClientProvider
from activity_core.temporal.fire import FireResult, fire_manual, manual_trigger_key, retry_fire
from activity_core.temporal.payloads import WORKFLOW_NAME, RunActivityInput, RunActivityResult
from activity_core.temporal.schedules import TemporalScheduleApplier, catchup_window_of
from activity_core.temporal.worker import build_activities, build_worker
from activity_core.temporal.workflow import RunActivityWorkflow

PROFILE = "harness.agent-dev@1.0.0"


class ScriptedSink:
    """An IssueSink that records what it is given and fails the first `failures` calls."""

    def __init__(self) -> None:
        self.failures = 0
        self.calls = 0
        self.published: list[SinkTask] = []

    @property
    def name(self) -> str:
        return "scripted"

    async def publish(self, task: SinkTask, *, still_owed: StillOwed | None = None) -> str | None:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            raise IssueSinkError("scripted sink outage", status=503)
        self.published.append(task)
        return f"sink-{len(self.published)}"

    async def aclose(self) -> None:
        return None


def definition(
    slug: str,
    *,
    cron: str | None = "0 6 * * 1-5",
    timezone: str = "Europe/Berlin",
    profile: str | None = PROFILE,
    paused: bool = False,
    rules: int = 1,
) -> ActivityDefinitionSpec:
    """A definition with `rules` rules (`daily-brief`, then `rule-2`, `rule-3`, ...)."""
    action: dict[str, Any] = {
        "task_template": "Research brief for {scheduled_for:%Y-%m-%d}",
        "target_repo": "research/briefs",
        "labels": ["automated", "research-brief"],
        "execution_refs": {"correlation_id": "context.request.correlation_id"},
    }
    if profile is not None:
        action["harness_profile_ref"] = profile
    raw: dict[str, Any] = {
        "id": slug,
        "title": f"Temporal test {slug}",
        "paused": paused,
        "rules": [
            {"id": "daily-brief" if n == 1 else f"rule-{n}", "action": action}
            for n in range(1, rules + 1)
        ],
    }
    if cron is not None:
        raw["schedule"] = {"cron": cron, "timezone": timezone}
    return ActivityDefinitionSpec.model_validate(raw)


@dataclass
class TemporalHarness:
    client: Client
    settings: ActivityCoreSettings
    pool: asyncpg.Pool
    sink: ScriptedSink
    applier: TemporalScheduleApplier
    slug: str = field(default_factory=lambda: f"t-{uuid.uuid4().hex[:10]}")

    @property
    def task_queue(self) -> str:
        return self.settings.temporal_task_queue

    async def sync(self, *specs: ActivityDefinitionSpec) -> None:
        await sync_definitions(self.pool, list(specs), self.applier)

    async def define(self, **definition_kw: Any) -> ActivityDefinitionSpec:
        """`definition(self.slug, **definition_kw)`, synced."""
        spec = definition(self.slug, **definition_kw)
        await self.sync(spec)
        return spec

    async def activity_runs(self) -> list[asyncpg.Record]:
        return await self.pool.fetch("SELECT * FROM activity_runs ORDER BY scheduled_for, id")

    async def ops_runs(self) -> list[asyncpg.Record]:
        return await self.pool.fetch("SELECT * FROM ops_runs ORDER BY triggering_event_id")

    async def wait_for_workflows(self, count: int, *, timeout: float = 20.0) -> list[str]:
        """Wait until `count` workflows of this test's task queue have closed; answer their
        run ids."""
        query = f'TaskQueue = "{self.task_queue}" AND ExecutionStatus != "Running"'
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            runs = [wf.run_id async for wf in self.client.list_workflows(query)]
            if len(runs) >= count:
                return runs
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{len(runs)} of {count} workflows closed in {timeout}s")
            await asyncio.sleep(0.2)

    async def result(self, handle: WorkflowHandle[Any, Any]) -> Any:
        return await asyncio.wait_for(handle.result(), timeout=30)

    async def start_fire(self, slug: str) -> WorkflowHandle[Any, RunActivityResult]:
        """A RunActivityWorkflow of `slug` started on the task queue as a manual fire
        would start it (its own trigger key, correlation id c-1)."""
        key = manual_trigger_key()
        return await self.client.start_workflow(
            WORKFLOW_NAME,
            RunActivityInput(
                activity_slug=slug, trigger_key=key, request={"correlation_id": "c-1"}
            ),
            id=f"activity:{slug}:{key}",
            task_queue=self.task_queue,
            result_type=RunActivityResult,
        )

    async def fired(self, answer: dict[str, Any]) -> RunActivityResult:
        """The result of the workflow a fire answered with (`workflow_id`, `run_id`)."""
        return await self.closed(answer["workflow_id"], answer["run_id"])

    async def closed(self, workflow_id: str, run_id: str) -> RunActivityResult:
        """The result of one run of a RunActivityWorkflow, once it closed."""
        handle = self.client.get_workflow_handle(
            workflow_id, run_id=run_id, result_type=RunActivityResult
        )
        result: RunActivityResult = await self.result(handle)
        return result

    async def fire_manual(self, request: dict[str, Any]) -> FireResult:
        """A manual fire of the harness's automation, as the service starts one."""
        return await fire_manual(
            self.pool,
            TemporalClientProvider(self.settings),
            automation=self.slug,
            request=request,
            task_queue=self.task_queue,
        )

    async def retry_fire(self, fire: str) -> FireResult:
        """The harness's automation's fire `fire` (a run id or UUID) started again."""
        return await retry_fire(
            self.pool,
            TemporalClientProvider(self.settings),
            automation=self.slug,
            fire=fire,
            task_queue=self.task_queue,
        )

    async def workflow_ids(self) -> list[str]:
        """Every workflow of this test's task queue, running or closed, sorted."""
        query = f'TaskQueue = "{self.task_queue}"'
        return sorted([wf.id async for wf in self.client.list_workflows(query)])


async def temporal_app(temporal: TemporalHarness, app_factory: Any, **env: Any) -> AppClient:
    """Another app on the test's database (`app_factory`), bound to the harness's Temporal
    and task queue; `env` adds or overrides settings."""
    settings = {
        "TEMPORAL_ADDRESS": temporal.settings.temporal_address,
        "TEMPORAL_TASK_QUEUE": temporal.task_queue,
        **env,
    }
    api: AppClient = await app_factory(**settings)
    return api


class AutomationApp(NamedTuple):
    spec: ActivityDefinitionSpec
    api: AppClient
    operator: dict[str, str]
    path: str
    """`/ops/automations/<slug>`: the automation's resource, `/pause` and the rest below it."""


async def automation_app(
    temporal: TemporalHarness, app_factory: Any, **definition_kw: Any
) -> AutomationApp:
    """Where an /ops/automations test starts: `temporal.define(**definition_kw)`, then an app
    on the harness's Temporal (`temporal_app`), its operator headers and the automation's
    path."""
    spec = await temporal.define(**definition_kw)
    api = await temporal_app(temporal, app_factory)
    return AutomationApp(spec, api, api.operator_headers(), f"/ops/automations/{spec.id}")


# What a test may put in the worker instead of the real activities (given the harness and
# the real ones): the activity callables it registers.
ActivitiesFor = Callable[[TemporalHarness, ActivityCoreActivities], list[Any]]


async def start_worker_harness(
    client: Client, db_dsn: str, activities_for: ActivitiesFor | None = None, /, **env: Any
) -> tuple[TemporalHarness, Worker]:
    settings = load_settings(
        **settings_env(
            TEMPORAL_TASK_QUEUE=f"ac-test-{uuid.uuid4().hex[:12]}",
            ACTIVITY_CORE_ISSUE_SINK="none",
            **env,
        )
    )
    pool = await create_pool(db_dsn, min_size=1, max_size=5)
    sink = ScriptedSink()
    activities = build_activities(settings, pool, sink)
    harness = TemporalHarness(
        client=client,
        settings=settings,
        pool=pool,
        sink=sink,
        applier=TemporalScheduleApplier(
            client,
            task_queue=settings.temporal_task_queue,
            catchup_window=catchup_window_of(settings),
        ),
    )
    if activities_for is None:
        worker = build_worker(
            client, task_queue=settings.temporal_task_queue, activities=activities
        )
    else:
        worker = Worker(
            client,
            task_queue=settings.temporal_task_queue,
            workflows=[RunActivityWorkflow],
            activities=activities_for(harness, activities),
        )
    return harness, worker
