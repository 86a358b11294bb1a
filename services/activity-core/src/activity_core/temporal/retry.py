"""`activity-core retry-fire AUTOMATION FIRE`: start one earlier fire again (`fire.retry_fire`).

For a fire the ops UI shows as failed (once its cause is fixed: a definition re-synced, a
policy satisfied) or whose IssueSink writes failed: the retry has the fire's idempotency
keys, so what it emitted is found again and nothing is emitted twice. Prints one line with
the new fire's run id (its page is the automation's page in the ops UI), exit 0; else one
line saying why, exit 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager

from activity_core.command_failure import fail, no_database
from activity_core.db.errors import DATABASE_FAILURES
from activity_core.db.pool import create_pool
from activity_core.queue.errors import DatabaseUnavailable
from activity_core.settings import ActivityCoreSettings
from activity_core.temporal.client import TemporalClientProvider
from activity_core.temporal.errors import (
    AutomationNotFound,
    AutomationPaused,
    FireNotFound,
    TemporalUnavailable,
)
from activity_core.temporal.fire import FireResult, retry_fire

__all__ = ["run_retry_command"]

# A unit of work's translation, or the driver's own failure outside one (db/errors.py).
_NO_DATABASE: tuple[type[BaseException], ...] = (DatabaseUnavailable, *DATABASE_FAILURES)


async def _retry(
    settings: ActivityCoreSettings, dsn: str, automation: str, fire: str
) -> FireResult:
    pool = await create_pool(dsn, min_size=1, max_size=2)
    try:
        # connected only once the fire is found; never starts a dev server (a retry needs
        # the worker, which runs one in development)
        return await retry_fire(
            pool,
            TemporalClientProvider(settings),
            automation=automation,
            fire=fire,
            task_queue=settings.temporal_task_queue,
        )
    finally:
        await pool.close()


def run_retry_command(
    settings: ActivityCoreSettings,
    *,
    automation: str,
    fire: str,
    database: Callable[[], AbstractContextManager[str]],
) -> int:
    try:
        with database() as dsn:
            result = asyncio.run(_retry(settings, dsn, automation, fire))
    except (AutomationNotFound, FireNotFound, AutomationPaused, TemporalUnavailable) as exc:
        return fail(exc, 1)
    except _NO_DATABASE as exc:
        return no_database(exc)
    print(
        f"activity-core: retrying fire {fire} of {automation}: "
        f"workflow {result.workflow_id}, run {result.run_id}",
        flush=True,
    )
    return 0
