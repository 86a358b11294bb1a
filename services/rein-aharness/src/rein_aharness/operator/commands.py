"""`close-outbox status` and `close-outbox replay`: open the store, act, report."""

from __future__ import annotations

import os
from typing import TextIO

import anyio

from rein_aharness.adapters.close_delivery import deliver_close
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import QueueAuthError, QueueTransientError
from rein_aharness.operator.exit_codes import ExitCode, exit_code_for
from rein_aharness.operator.report import render_json, render_table
from rein_aharness.outbox.paths import resolve_outbox_root
from rein_aharness.outbox.replay import ReplayReport, replay_pending
from rein_aharness.outbox.store import OutboxStore
from rein_aharness.settings import Settings, SettingsProblem

__all__ = ["open_store", "replay_command", "status_command"]


def open_store(settings: Settings) -> OutboxStore:
    """The store under the configured root (raises OutboxPathError or OSError)."""
    return OutboxStore(resolve_outbox_root(settings.rein_aharness_state_dir, os.environ))


def status_command(settings: Settings, *, as_json: bool, out: TextIO) -> ExitCode:
    snapshot = open_store(settings).snapshot()
    print(render_json(snapshot) if as_json else render_table(snapshot), file=out)
    return exit_code_for(snapshot)


def replay_command(
    settings: Settings, *, limit: int | None, as_json: bool, out: TextIO
) -> ExitCode:
    """Deliver pending closes (only closes: no approach, model or repository work).

    A transport outage or an auth failure ends the pass after the entry that met it,
    since every later entry would meet it too; those entries stay pending. With
    ACTIVITY_CORE_WORKER_ID set, only entries recorded under that identity are sent;
    the others are set aside (left pending, reported): the token would be refused for
    them alone. Run it with a recorded identity's id and token to deliver its entries.
    """
    if settings.activity_core_url is None:
        raise SettingsProblem("ACTIVITY_CORE_URL: required for close-outbox replay")
    base_url = str(settings.activity_core_url)
    token = settings.activity_core_worker_token
    store = open_store(settings)

    async def replay() -> ReplayReport:
        async with ActivityCoreQueueClient(
            base_url, token.get_secret_value() if token is not None else None
        ) as client:
            return await replay_pending(
                store,
                deliver_close(client),
                limit=limit,
                stop_on=(QueueTransientError, QueueAuthError),
                identity=settings.activity_core_worker_id,
            )

    report = anyio.run(replay)
    snapshot = store.snapshot()
    print(render_json(snapshot, report) if as_json else render_table(snapshot, report), file=out)
    return exit_code_for(snapshot)
