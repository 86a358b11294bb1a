"""`activity-core temporal-worker`: hosts `RunActivityWorkflow` and its activities on
TEMPORAL_TASK_QUEUE, with a database pool and the configured IssueSink.

SIGTERM or Ctrl-C stops polling, lets running activities finish (bounded), then closes the
pool and, if this process started the local dev server, stops it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta

import asyncpg
from temporalio.client import Client
from temporalio.worker import Worker

from ..db.pool import create_pool
from ..emission.sink import IssueSink, build_issue_sink
from ..settings import ActivityCoreSettings, SettingsError
from .activities import ActivityCoreActivities
from .client import temporal_client
from .errors import TemporalUnavailable
from .payloads import FirePolicy
from .workflow import RunActivityWorkflow

GRACEFUL_SHUTDOWN = timedelta(seconds=20)


def build_worker(client: Client, *, task_queue: str, activities: ActivityCoreActivities) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[RunActivityWorkflow],
        activities=activities.all(),
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
    )


def fire_policy(settings: ActivityCoreSettings) -> FirePolicy:
    """The retry timing of the fires this worker runs (workflow.py says why)."""
    return FirePolicy(
        db_retry_max_seconds=settings.fire_retry_max_seconds,
        sink_retry_max_seconds=settings.sink_retry_max_seconds,
        sink_retry_window_seconds=settings.sink_retry_window_seconds,
    )


def build_activities(
    settings: ActivityCoreSettings, pool: asyncpg.Pool, sink: IssueSink
) -> ActivityCoreActivities:
    return ActivityCoreActivities(
        pool,
        sink,
        queue_enabled=settings.queue_enabled,
        require_profile=settings.require_harness_profile,
        fire_policy=fire_policy(settings),
    )


async def serve_worker(
    settings: ActivityCoreSettings,
    dsn: str,
    sink: IssueSink,
    stop: asyncio.Event,
) -> None:
    """Run the worker until `stop` is set. Raises TemporalUnavailable when Temporal cannot
    be reached, OSError / asyncpg errors when the database cannot."""
    pool = await create_pool(dsn, min_size=1, max_size=settings.db_pool_max)
    try:
        async with temporal_client(settings) as client:
            activities = build_activities(settings, pool, sink)
            async with build_worker(
                client, task_queue=settings.temporal_task_queue, activities=activities
            ):
                line = (
                    f"temporal worker on task queue {settings.temporal_task_queue!r} "
                    f"(namespace {settings.temporal_namespace!r})"
                )
                print(f"activity-core: {line}", flush=True)
                await stop.wait()
                print("activity-core: stopping the temporal worker", flush=True)
    finally:
        await pool.close()


async def _main(settings: ActivityCoreSettings, dsn: str, sink: IssueSink) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await serve_worker(settings, dsn, sink, stop)
    finally:
        await sink.aclose()


def run_worker_command(
    settings: ActivityCoreSettings, *, database: Callable[[], AbstractContextManager[str]]
) -> int:
    """The body of the CLI subcommand: 0 after a clean stop, else one line and non-zero.
    The sink configuration is checked before any database or server is started."""
    try:
        sink = build_issue_sink(settings)
    except SettingsError as exc:
        print(f"activity-core: {exc}", file=sys.stderr)
        return 2
    try:
        with database() as dsn:
            asyncio.run(_main(settings, dsn, sink))
    except TemporalUnavailable as exc:
        print(f"activity-core: {exc}", file=sys.stderr)
        return 1
    except (OSError, asyncpg.PostgresError) as exc:
        print(
            f"activity-core: cannot connect to the database: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    return 0
