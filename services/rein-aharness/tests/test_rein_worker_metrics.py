"""The optional metrics endpoint: the close outbox's gauges, read at scrape time."""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from rein_aharness.operator.exit_codes import ExitCode
from rein_aharness.outbox import OutboxStore, replay_pending
from rein_aharness.outbox.record import OutboxRecord
from rein_aharness.profiles import load_catalogue
from rein_aharness.worker import Transports, run_worker
from rein_aharness.worker.metrics import serve_metrics
from rein_worker_kit import (
    FAST,
    ActivityCore,
    RecordingTransport,
    Repos,
    outbox,
    worker_settings,
    write_catalogue,
)

OTHER = "rein-aharness@previous-id"


def _gauges(text: str) -> dict[str, float]:
    return {
        name: float(value)
        for name, value in re.findall(r"^(rein_aharness_\S+) (\S+)$", text, re.MULTILINE)
    }


async def _applied(record: OutboxRecord) -> None:
    return None


async def test_the_endpoint_reports_pending_quarantined_by_reason_and_delivered(
    store: OutboxStore, make_close: Any
) -> None:
    store.enqueue_close(**make_close(run_id="delivered"))
    await replay_pending(store, _applied)
    store.enqueue_close(**make_close(run_id="foreign", worker_id=OTHER))
    await replay_pending(
        store, _applied, identity="rein-aharness@railiance01", quarantine_foreign=True
    )
    store.enqueue_close(**make_close(run_id="waiting"))
    (store.paths.pending / "junk.txt").write_text("not an entry")
    await anyio.to_thread.run_sync(store.prepare_replay)  # quarantines the junk

    with serve_metrics(store, "127.0.0.1", 0) as (host, port):
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"http://{host}:{port}/metrics")

    assert answer.status_code == 200
    assert _gauges(answer.text) == {
        "rein_aharness_close_outbox_readable": 1.0,
        "rein_aharness_close_outbox_pending": 1.0,
        "rein_aharness_close_outbox_oldest_pending_age_seconds": 0.0,
        'rein_aharness_close_outbox_quarantined{reason="foreign_worker_identity"}': 1.0,
        'rein_aharness_close_outbox_quarantined{reason="unexpected_name"}': 1.0,
        "rein_aharness_close_outbox_delivered": 1.0,
    }


async def test_the_oldest_pending_age_is_how_long_the_oldest_entry_has_waited(
    store: OutboxStore, make_close: Any, clock: Any
) -> None:
    async def scrape() -> dict[str, float]:
        with serve_metrics(store, "127.0.0.1", 0) as (host, port):
            async with httpx.AsyncClient() as http:
                return _gauges((await http.get(f"http://{host}:{port}/metrics")).text)

    store.enqueue_close(**make_close(run_id="first"))
    clock.advance(seconds=90)
    store.enqueue_close(**make_close(run_id="second"))
    clock.advance(seconds=30)
    waiting = await scrape()
    await replay_pending(store, _applied)
    delivered = await scrape()

    assert waiting["rein_aharness_close_outbox_pending"] == 2
    assert waiting["rein_aharness_close_outbox_oldest_pending_age_seconds"] == 120.0
    assert delivered["rein_aharness_close_outbox_pending"] == 0
    assert delivered["rein_aharness_close_outbox_oldest_pending_age_seconds"] == 0.0


async def test_an_unreadable_outbox_is_reported_not_raised(store: OutboxStore) -> None:
    store.paths.pending.rmdir()
    with serve_metrics(store, "127.0.0.1", 0) as (host, port):
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"http://{host}:{port}/metrics")
    assert answer.status_code == 200
    assert _gauges(answer.text) == {"rein_aharness_close_outbox_readable": 0.0}


async def test_run_serves_the_gauges_while_it_runs_and_stops_serving_after(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repos.make()
    catalogue = write_catalogue(tmp_path / "profiles.yaml")
    settings = worker_settings(
        tmp_path, repos, catalogue, rein_aharness_metrics_address="127.0.0.1:0"
    )
    outbox(settings).enqueue_close(
        run_id=str(uuid.uuid4()),
        transaction_id="rtx-x.1",
        worker_id=OTHER,
        action="complete",
        result={"ok": True},
    )
    stop = anyio.Event()
    scraped: list[str] = []
    address: list[str] = []

    async def scrape_then_stop() -> None:
        with anyio.fail_after(20):
            while not address:
                address.extend(
                    match.group(1)
                    for record in caplog.records
                    if (match := re.fullmatch(r"metrics on (http://\S+)", record.getMessage()))
                )
                await anyio.sleep(0.05)
            async with httpx.AsyncClient() as http:
                while True:
                    text = (await http.get(address[0])).text
                    if "foreign_worker_identity" in text:  # the first pass is done
                        scraped.append(text)
                        break
                    await anyio.sleep(0.05)
        stop.set()

    with caplog.at_level(logging.INFO, logger="rein_aharness"):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(scrape_then_stop)
            code = await run_worker(
                settings,
                load_catalogue(catalogue),
                once=False,
                transports=Transports(queue=RecordingTransport(activity_core.transport())),
                retry=FAST,
                stop=stop,
            )

    assert code == ExitCode.QUARANTINED
    gauges = _gauges(scraped[0])
    assert gauges['rein_aharness_close_outbox_quarantined{reason="foreign_worker_identity"}'] == 1
    assert gauges["rein_aharness_close_outbox_pending"] == 0
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as http:
            await http.get(address[0])
