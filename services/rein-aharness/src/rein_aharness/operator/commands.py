"""`close-outbox status|replay|adopt`: open the store, act, report.

The commands open the outbox under the worker identity in ACTIVITY_CORE_WORKER_ID (if
set) without refusing one that lost entries: they report them (exit 5). A directory
others could change, or a replaced outbox, is refused as the worker refuses it.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import anyio
import httpx

from rein_aharness.adapters.close_delivery import deliver_close
from rein_aharness.adapters.glas_changes import GlasChangesClient
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import QueueAuthError, QueueTransientError
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.operator.exit_codes import ExitCode, exit_code_for
from rein_aharness.operator.report import render_json, render_table
from rein_aharness.outbox.identity import adopt_outbox
from rein_aharness.outbox.paths import OutboxPaths, default_state_dir, resolve_outbox_root
from rein_aharness.outbox.replay import ReplayReport, replay_pending
from rein_aharness.outbox.store import OutboxStore
from rein_aharness.repository.changes_store import ChangesStore, GlasBundles
from rein_aharness.settings import ReinAharnessSettings, SettingsError

__all__ = [
    "adopt_command",
    "changes_store",
    "glas_changes_client",
    "open_store",
    "replay_command",
    "status_command",
]

CHANGES_DIR = "changes"


def changes_store(
    settings: ReinAharnessSettings, state_dir: Path, glas: GlasBundles | None = None
) -> ChangesStore:
    """Where changes bundles live (`<state>/changes/`), and how one lost before its close
    is found again: written from the landed branch (local gateway), or fetched again
    from `glas` (a remote gateway, README "Handing the changes over")."""
    return ChangesStore(
        state_dir / CHANGES_DIR,
        repositories_root=settings.rein_aharness_repositories_root,
        source=settings.repository_source(),
        max_bytes=settings.rein_aharness_changes_max_bytes,
        glas=glas,
    )


def glas_changes_client(
    settings: ReinAharnessSettings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    retry: RetryPolicy | None = None,
) -> GlasChangesClient | None:
    """The client that fetches a remote Glas's changes bundles; None without one."""
    if settings.rein_aharness_glas_url is None:
        return None
    token = settings.rein_aharness_glas_token
    return GlasChangesClient(
        str(settings.rein_aharness_glas_url),
        token.get_secret_value() if token is not None else None,
        max_bytes=settings.rein_aharness_changes_max_bytes,
        transport=transport,
        timeout_seconds=min(settings.rein_aharness_glas_timeout_seconds, 300.0),
        retry=retry,
    )


def open_store(settings: ReinAharnessSettings) -> OutboxStore:
    """The store under the configured root (raises OutboxPathError, OutboxReplacedError or
    OSError); lost entries are reported by its snapshots, not refused."""
    return OutboxStore(
        resolve_outbox_root(settings.rein_aharness_state_dir, os.environ),
        identity=settings.activity_core_worker_id,
        verify=False,
    )


def adopt_command(settings: ReinAharnessSettings, *, as_json: bool, out: TextIO) -> ExitCode:
    """Accept the outbox as it now is, after an operator has looked: pin it (create it,
    or give it a marker, if it has none) and write off the entries it lost, each named.
    Then report as `status` does."""
    root = resolve_outbox_root(settings.rein_aharness_state_dir, os.environ)
    adoption = adopt_outbox(
        OutboxPaths(root),
        identity=settings.activity_core_worker_id,
        clock=lambda: datetime.now(UTC),
    )
    snapshot = open_store(settings).snapshot()
    print(
        render_json(snapshot, adoption=adoption)
        if as_json
        else render_table(snapshot, adoption=adoption),
        file=out,
    )
    return exit_code_for(snapshot)


def status_command(settings: ReinAharnessSettings, *, as_json: bool, out: TextIO) -> ExitCode:
    snapshot = open_store(settings).snapshot()
    print(render_json(snapshot) if as_json else render_table(snapshot), file=out)
    return exit_code_for(snapshot)


def replay_command(
    settings: ReinAharnessSettings, *, limit: int | None, as_json: bool, out: TextIO
) -> ExitCode:
    """Deliver pending closes (only closes: no approach, model or repository work).

    A transport outage or an auth failure ends the pass after the entry that met it,
    since every later entry would meet it too; those entries stay pending. With
    ACTIVITY_CORE_WORKER_ID set, only entries recorded under that identity are sent;
    the others are set aside (left pending, reported): the token would be refused for
    them alone. Run it with a recorded identity's id and token to deliver its entries.
    """
    if settings.activity_core_url is None:
        raise SettingsError("ACTIVITY_CORE_URL: required for close-outbox replay")
    base_url = str(settings.activity_core_url)
    token = settings.activity_core_worker_token
    store = open_store(settings)
    state_dir = settings.rein_aharness_state_dir or default_state_dir(os.environ)

    async def replay() -> ReplayReport:
        glas = glas_changes_client(settings)
        changes = changes_store(settings, state_dir, glas)
        try:
            async with ActivityCoreQueueClient(
                base_url, token.get_secret_value() if token is not None else None
            ) as client:
                return await replay_pending(
                    store,
                    deliver_close(client, changes=changes),
                    limit=limit,
                    stop_on=(QueueTransientError, QueueAuthError),
                    identity=settings.activity_core_worker_id,
                )
        finally:
            if glas is not None:
                await glas.aclose()

    report = anyio.run(replay)
    snapshot = store.snapshot()
    print(render_json(snapshot, report) if as_json else render_table(snapshot, report), file=out)
    return exit_code_for(snapshot)
