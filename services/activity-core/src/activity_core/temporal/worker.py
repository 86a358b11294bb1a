"""`activity-core temporal-worker`: hosts `RunActivityWorkflow` and its activities on
TEMPORAL_TASK_QUEUE, with a database pool and the configured IssueSink, and
`PublishChangesWorkflow` (an operator's publication of a run's changes) with its own.

SIGTERM or Ctrl-C stops polling, lets running activities finish (bounded), then closes the
pool and, if this process started the local dev server, stops it.

Two optional endpoints (their settings: worker_endpoints.py): `/livez` for a liveness
probe and `/readyz` for a readiness probe, served from their own thread from the moment
the event loop starts (`ops_runtime.liveness`; readiness: worker_readiness.py, 503 until
the server lists this worker's pollers), and the Temporal SDK's Prometheus metrics, served
by the SDK's core from a runtime made the process default before any client exists.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import timedelta

import asyncpg
from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.worker import Worker

from activity_core.command_failure import fail, no_database
from activity_core.db.errors import DATABASE_FAILURES
from activity_core.db.pool import create_pool
from activity_core.emission.sink import IssueSink, build_issue_sink
from activity_core.publication.activities import PublicationActivities
from activity_core.settings import ActivityCoreSettings, SettingsError, parse_bind_address
from activity_core.temporal.activities import ActivityCoreActivities
from activity_core.temporal.client import temporal_client
from activity_core.temporal.errors import TemporalUnavailable
from activity_core.temporal.payloads import FirePolicy
from activity_core.temporal.publication_workflow import PublishChangesWorkflow
from activity_core.temporal.worker_endpoints import LIVENESS_ADDRESS, metrics_runtime
from activity_core.temporal.worker_readiness import PollerReadiness, watch_pollers
from activity_core.temporal.workflow import RunActivityWorkflow
from ops_runtime.liveness import serve_liveness

__all__ = ["build_activities", "build_worker", "fire_policy", "run_worker_command"]

GRACEFUL_SHUTDOWN = timedelta(seconds=20)


def build_worker(
    client: Client,
    *,
    task_queue: str,
    activities: ActivityCoreActivities,
    publication: PublicationActivities | None = None,
) -> Worker:
    """The fires' workflow and activities; with `publication`, PublishChangesWorkflow and
    its activities too (every `temporal-worker` process has both)."""
    workflows: list[type] = [RunActivityWorkflow]
    registered = activities.all()
    if publication is not None:
        workflows.append(PublishChangesWorkflow)
        registered = [*registered, *publication.all()]
    return Worker(
        client,
        task_queue=task_queue,
        workflows=workflows,
        activities=registered,
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
    readiness: PollerReadiness,
) -> None:
    """Run the worker until `stop` is set, `readiness` following its pollers meanwhile.
    Raises TemporalUnavailable when Temporal cannot be reached, OSError / asyncpg errors
    when the database cannot."""
    pool = await create_pool(dsn, min_size=1, max_size=settings.db_pool_max)
    try:
        async with temporal_client(settings) as client:
            activities = build_activities(settings, pool, sink)
            task_queue = settings.temporal_task_queue
            publication = PublicationActivities(pool, settings)
            async with build_worker(
                client, task_queue=task_queue, activities=activities, publication=publication
            ) as worker:
                identity = worker.config().get("identity") or client.identity
                watcher = asyncio.create_task(
                    watch_pollers(
                        client, task_queue=task_queue, identity=identity, readiness=readiness
                    )
                )
                try:
                    line = (
                        f"temporal worker on task queue {task_queue!r} "
                        f"(namespace {settings.temporal_namespace!r}, identity {identity!r})"
                    )
                    print(f"activity-core: {line}", flush=True)
                    await stop.wait()
                    print("activity-core: stopping the temporal worker", flush=True)
                finally:
                    # unready from here on: the worker stops polling as it shuts down
                    watcher.cancel()
                    readiness.stopping()
    finally:
        await pool.close()


@contextmanager
def _liveness(settings: ActivityCoreSettings, readiness: PollerReadiness) -> Iterator[None]:
    """The probe endpoints (/livez, /readyz) for the block, when their address is set;
    enter it on the loop."""
    address = settings.temporal_worker_liveness_address
    with ExitStack() as stack:
        if address is not None:
            host, port = parse_bind_address(address)
            max_stall = settings.temporal_worker_liveness_max_stall_seconds
            try:
                stack.enter_context(
                    serve_liveness(host, port, max_stall_seconds=max_stall, readiness=readiness)
                )
            except OSError as exc:
                raise SettingsError(
                    f"{LIVENESS_ADDRESS}: cannot listen on {address}: "
                    f"{exc.strerror or type(exc).__name__}"
                ) from None
        yield


async def _main(
    settings: ActivityCoreSettings,
    dsn: str,
    sink: IssueSink,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    readiness = PollerReadiness(
        task_queue=settings.temporal_task_queue, namespace=settings.temporal_namespace
    )
    try:
        with _liveness(settings, readiness):
            await serve_worker(settings, dsn, sink, stop, readiness)
    finally:
        await sink.aclose()


def run_worker_command(
    settings: ActivityCoreSettings, *, database: Callable[[], AbstractContextManager[str]]
) -> int:
    """The body of the CLI subcommand: 0 after a clean stop, else one line and non-zero.
    The sink and endpoint configuration is checked (and the metrics address bound) before
    any database or server is started (the endpoints' addresses were checked with the
    settings)."""
    try:
        runtime = metrics_runtime(settings)
        sink = build_issue_sink(settings)
    except SettingsError as exc:
        return fail(exc, 2)
    if runtime is not None:
        # Every client this process connects uses the default runtime, so the SDK's
        # metrics of the worker below are served from here.
        Runtime.set_default(runtime)
    try:
        with database() as dsn:
            asyncio.run(_main(settings, dsn, sink))
    except SettingsError as exc:
        return fail(exc, 2)
    except TemporalUnavailable as exc:
        return fail(exc, 1)
    except DATABASE_FAILURES as exc:
        return no_database(exc)
    return 0
