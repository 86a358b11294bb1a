"""The body of `activity-core sync-definitions PATH…`.

1. Load and validate every file (directories: their ``*.yaml`` / ``*.yml``). Any error:
   print each as ``file: definition-id: field.path: message`` on stderr, exit 1, and
   touch nothing: no database, no scheduler.
2. Open the schedule applier (Temporal), so an unreachable scheduler also changes nothing.
3. Upsert every definition in one transaction (retiring those whose file is gone), then
   apply the schedules. Print a summary, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import TextIO

from activity_core.db.errors import DATABASE_FAILURES
from activity_core.db.pool import create_pool
from activity_core.definitions.model import ActivityDefinitionSpec
from activity_core.definitions.sync import (
    ScheduleApplier,
    ScheduleApplyError,
    SyncReport,
    sync_definitions,
)
from activity_core.definitions.validate import load_definitions
from activity_core.settings import ActivityCoreSettings

__all__ = ["PREFIX", "open_schedule_applier", "run_sync_definitions"]

PREFIX = "activity-core"


def open_schedule_applier(
    settings: ActivityCoreSettings,
) -> AbstractAsyncContextManager[ScheduleApplier]:
    """The Temporal applier; imported here, lazily, so validation never needs Temporal.
    Tests replace this function to record what a sync applies."""
    from activity_core.temporal.schedules import open_schedule_applier as temporal_applier

    return temporal_applier(settings)


class _Failed(Exception):
    """A failure already described in one line."""


def run_sync_definitions(
    settings: ActivityCoreSettings,
    paths: Sequence[Path],
    *,
    database: Callable[[], AbstractContextManager[str]],
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    result = load_definitions(paths, require_profile=settings.require_harness_profile)
    if not result.ok:
        for error in result.errors:
            print(error, file=err)
        print(
            f"{PREFIX}: {len(result.errors)} error(s) in the definitions; nothing changed",
            file=err,
        )
        return 1
    try:
        with database() as dsn:
            report = asyncio.run(_sync(settings, dsn, result.specs))
    except _Failed as exc:
        print(f"{PREFIX}: {exc}", file=err)
        return 1
    for label, slugs in (
        ("created", report.created),
        ("updated", report.updated),
        ("paused (file removed)", report.paused),
    ):
        for slug in slugs:
            print(f"{label}: {slug}", file=out)
    print(f"{PREFIX}: definitions synced: {report.summary()}", file=out)
    return 0


async def _sync(
    settings: ActivityCoreSettings, dsn: str, specs: Sequence[ActivityDefinitionSpec]
) -> SyncReport:
    async with contextlib.AsyncExitStack() as stack:
        try:
            pool = await create_pool(dsn, min_size=1, max_size=2)
        except DATABASE_FAILURES as exc:
            raise _Failed(f"cannot connect to the database: {type(exc).__name__}: {exc}") from exc
        stack.push_async_callback(pool.close)
        try:
            applier = await stack.enter_async_context(open_schedule_applier(settings))
        except Exception as exc:  # whatever the scheduler raises, nothing was changed yet
            raise _Failed(f"cannot reach the scheduler; nothing changed: {exc}") from exc
        try:
            return await sync_definitions(pool, specs, applier)
        except ScheduleApplyError as exc:
            raise _Failed(
                f"definitions stored, but applying their schedules failed: {exc}; "
                "re-run sync-definitions to finish"
            ) from exc
        except DATABASE_FAILURES as exc:
            raise _Failed(f"database error; nothing changed: {type(exc).__name__}: {exc}") from exc
