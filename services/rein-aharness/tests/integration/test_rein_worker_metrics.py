"""The optional metrics endpoint: the close outbox's gauges, read at scrape time, and the
worker's counters and histograms, scraped from a real `run` against activity-core on real
PostgreSQL while it claims, executes (in the real sandbox) and closes runs."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops_testsupport.silent_connections import seconds_until_closed
from rein_aharness.operator.exit_codes import ExitCode
from rein_aharness.outbox import OutboxStore, replay_pending
from rein_aharness.outbox.record import OutboxRecord
from rein_aharness.profiles import load_catalogue
from rein_aharness.sandbox import resolve_bwrap
from rein_aharness.settings import ReinAharnessSettings
from rein_aharness.worker import Transports, run_worker
from rein_aharness.worker.metrics import (
    CLAIM_RESULTS,
    CLOSE_RESULTS,
    FAILURE_REASONS,
    HEARTBEAT_RESULTS,
    REPLAY_OUTCOMES,
    RUN_OUTCOMES,
    SKIP_REASONS,
    WorkerMetrics,
    serve_metrics,
)
from rein_worker_kit import (
    FAST,
    GRANT,
    ActivityCore,
    RecordingTransport,
    Repos,
    command_profile,
    outbox,
    pending_complete,
    run_worker_once,
    worker_settings,
    write_catalogue,
)

OTHER = "rein-aharness@previous-id"


def _gauges(text: str) -> dict[str, float]:
    return {
        name: float(value)
        for name, value in re.findall(r"^(ops_worker_close_outbox_\S+) (\S+)$", text, re.MULTILINE)
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

    with serve_metrics(WorkerMetrics(store).registry, "127.0.0.1", 0) as (host, port):
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"http://{host}:{port}/metrics")

    assert answer.status_code == 200
    assert _gauges(answer.text) == {
        "ops_worker_close_outbox_readable": 1.0,
        "ops_worker_close_outbox_pending": 1.0,
        "ops_worker_close_outbox_oldest_pending_age_seconds": 0.0,
        'ops_worker_close_outbox_quarantined{reason="foreign_worker_identity"}': 1.0,
        'ops_worker_close_outbox_quarantined{reason="unexpected_name"}': 1.0,
        "ops_worker_close_outbox_delivered": 1.0,
    }


async def test_the_oldest_pending_age_is_how_long_the_oldest_entry_has_waited(
    store: OutboxStore, make_close: Any, clock: Any
) -> None:
    async def scrape() -> dict[str, float]:
        with serve_metrics(WorkerMetrics(store).registry, "127.0.0.1", 0) as (host, port):
            async with httpx.AsyncClient() as http:
                return _gauges((await http.get(f"http://{host}:{port}/metrics")).text)

    store.enqueue_close(**make_close(run_id="first"))
    clock.advance(seconds=90)
    store.enqueue_close(**make_close(run_id="second"))
    clock.advance(seconds=30)
    waiting = await scrape()
    await replay_pending(store, _applied)
    delivered = await scrape()

    assert waiting["ops_worker_close_outbox_pending"] == 2
    assert waiting["ops_worker_close_outbox_oldest_pending_age_seconds"] == 120.0
    assert delivered["ops_worker_close_outbox_pending"] == 0
    assert delivered["ops_worker_close_outbox_oldest_pending_age_seconds"] == 0.0


async def test_an_unreadable_outbox_is_reported_not_raised(store: OutboxStore) -> None:
    store.paths.pending.rmdir()
    with serve_metrics(WorkerMetrics(store).registry, "127.0.0.1", 0) as (host, port):
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"http://{host}:{port}/metrics")
    assert answer.status_code == 200
    assert _gauges(answer.text) == {"ops_worker_close_outbox_readable": 0.0}


@dataclass(frozen=True)
class Scraped:
    code: ExitCode
    text: str  # the exposition that met `until`
    address: str


async def _scrape_while_running(
    settings: ReinAharnessSettings,
    activity_core: ActivityCore,
    caplog: pytest.LogCaptureFixture,
    until: Callable[[str], bool],
) -> Scraped:
    """`rein-aharness run` (the loop) with its metrics endpoint; scrape it until an
    exposition meets `until`, then stop the worker."""
    assert settings.rein_aharness_profiles is not None
    stop = anyio.Event()
    scraped: list[str] = []
    address: list[str] = []

    async def scrape_then_stop() -> None:
        with anyio.fail_after(60):
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
                    if until(text):
                        scraped.append(text)
                        break
                    await anyio.sleep(0.05)
        stop.set()

    with caplog.at_level(logging.INFO, logger="rein_aharness"):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(scrape_then_stop)
            code = await run_worker(
                settings,
                load_catalogue(settings.rein_aharness_profiles),
                once=False,
                transports=Transports(queue=RecordingTransport(activity_core.transport())),
                retry=FAST,
                stop=stop,
            )
    return Scraped(code, scraped[0], address[0])


def _by(text: str, name: str, *labels: str) -> dict[str, float]:
    """The samples called `name`, keyed by their `labels` values joined with `/`."""
    return {
        "/".join(sample.labels[label] for label in labels): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def _zeros(*values: str) -> dict[str, float]:
    return dict.fromkeys(values, 0.0)


def _ran(outcome: str, count: int) -> Callable[[str], bool]:
    return lambda text: _by(text, "ops_worker_runs_total", "outcome").get(outcome) == count


async def test_run_serves_the_gauges_while_it_runs_and_stops_serving_after(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repos.make()
    settings = worker_settings(tmp_path, repos, rein_aharness_metrics_address="127.0.0.1:0")
    outbox(settings).enqueue_close(
        run_id=str(uuid.uuid4()),
        transaction_id="rtx-x.1",
        worker_id=OTHER,
        action="complete",
        result={"ok": True},
    )

    scraped = await _scrape_while_running(
        settings,
        activity_core,
        caplog,
        until=lambda text: "foreign_worker_identity" in text,  # the first pass is done
    )

    assert scraped.code == ExitCode.QUARANTINED
    gauges = _gauges(scraped.text)
    assert gauges['ops_worker_close_outbox_quarantined{reason="foreign_worker_identity"}'] == 1
    assert gauges["ops_worker_close_outbox_pending"] == 0
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as http:
            await http.get(scraped.address)


async def test_every_counter_starts_at_zero_for_each_of_its_label_values(
    store: OutboxStore,
) -> None:
    with serve_metrics(WorkerMetrics(store).registry, "127.0.0.1", 0) as (host, port):
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://{host}:{port}/metrics")).text

    assert _by(text, "ops_worker_claims_total", "result") == _zeros(*CLAIM_RESULTS)
    assert _by(text, "ops_worker_turns_skipped_total", "reason") == _zeros(*SKIP_REASONS)
    assert _by(text, "ops_worker_runs_total", "outcome") == _zeros(*RUN_OUTCOMES)
    assert _by(text, "ops_worker_execution_failures_total", "reason") == _zeros(*FAILURE_REASONS)
    assert _by(text, "ops_worker_heartbeats_total", "result") == _zeros(*HEARTBEAT_RESULTS)
    assert _by(text, "ops_worker_outbox_replays_total", "outcome") == _zeros(*REPLAY_OUTCOMES)
    assert _by(text, "ops_worker_closes_total", "path", "result") == _zeros(
        *(f"{path}/{result}" for path, results in CLOSE_RESULTS.items() for result in results)
    )
    assert _by(text, "ops_worker_execution_duration_seconds_count", "selection") == _zeros(
        "profiled", "legacy"
    )
    assert _by(text, "ops_worker_close_duration_seconds_count", "path") == _zeros(
        "outbox", "direct"
    )
    # the outbox gauges are served from the same registry
    assert _gauges(text)["ops_worker_close_outbox_readable"] == 1


async def test_a_completed_a_failed_and_a_refused_run_move_their_counters(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repos.make()
    catalogue = write_catalogue(
        tmp_path / "profiles.yaml",
        # heartbeats every lease/3 = 1 s: this run outlives one before it fails
        command_profile("fails", "sleep 1.5; exit 3"),
    )
    settings = worker_settings(
        tmp_path,
        repos,
        catalogue,
        rein_aharness_metrics_address="127.0.0.1:0",
        rein_aharness_lease_seconds=3,
    )
    completed = await activity_core.seeded.run(
        harness_profile_ref="harness.brief@1.0.0", repository_grant=GRANT, priority="high"
    )
    failed = await activity_core.seeded.run(
        harness_profile_ref="harness.fails@1.0.0", repository_grant=GRANT, priority="medium"
    )
    refused = await activity_core.seeded.run(
        harness_profile_ref="harness.unknown@1.0.0", repository_grant=GRANT, priority="low"
    )

    def all_three_closed_and_the_queue_empty(text: str) -> bool:
        runs = _by(text, "ops_worker_runs_total", "outcome")
        claims = _by(text, "ops_worker_claims_total", "result")
        ended = runs.get("completed", 0) + runs.get("failed", 0) + runs.get("refused", 0)
        return ended == 3 and claims.get("empty", 0) >= 1

    scraped = await _scrape_while_running(
        settings, activity_core, caplog, until=all_three_closed_and_the_queue_empty
    )

    assert scraped.code == ExitCode.CLEAN
    states = [(await activity_core.row(run))["state"] for run in (completed, failed, refused)]
    assert states == ["succeeded", "failed", "failed"]
    text = scraped.text
    assert _by(text, "ops_worker_runs_total", "outcome") == {
        **_zeros(*RUN_OUTCOMES),
        "completed": 1.0,
        "failed": 1.0,
        "refused": 1.0,
    }
    assert _by(text, "ops_worker_execution_failures_total", "reason") == {
        **_zeros(*FAILURE_REASONS),
        "approach_failed": 1.0,
        "refused_before_execution": 1.0,
    }
    claims = _by(text, "ops_worker_claims_total", "result")
    assert (claims["claimed"], claims["error"]) == (3.0, 0.0)
    assert claims["empty"] >= 1
    closes = _by(text, "ops_worker_closes_total", "path", "result")
    assert {key: value for key, value in closes.items() if value} == {"outbox/applied": 3.0}
    # two runs executed (the refused one never did), three closes, all through the outbox
    assert _by(text, "ops_worker_execution_duration_seconds_count", "selection") == {
        "profiled": 2.0,
        "legacy": 0.0,
    }
    assert _by(text, "ops_worker_execution_duration_seconds_sum", "selection")["profiled"] > 1.5
    executions = _by(text, "ops_worker_execution_duration_seconds_bucket", "selection", "le")
    assert executions["profiled/1.0"] <= 1.0  # the failing one took longer
    assert executions["profiled/+Inf"] == 2.0
    assert _by(text, "ops_worker_close_duration_seconds_count", "path") == {
        "outbox": 3.0,
        "direct": 0.0,
    }
    heartbeats = _by(text, "ops_worker_heartbeats_total", "result")
    assert heartbeats["ok"] >= 1
    assert (heartbeats["failed"], heartbeats["refused"]) == (0.0, 0.0)
    assert _by(text, "ops_worker_turns_skipped_total", "reason") == _zeros(*SKIP_REASONS)


async def test_a_sandbox_failing_during_a_run_is_counted_and_the_worker_stops_claiming(
    activity_core: ActivityCore,
    repos: Repos,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repos.make()
    bwrap = resolve_bwrap(None)
    assert bwrap is not None
    # passes the start-up probe; fails once a run mounts a repository, and from then on
    # every probe fails too, so the worker claims nothing more
    broken = tmp_path / "broken"
    flaky = tmp_path / "bin" / "bwrap"
    flaky.parent.mkdir()
    flaky.write_text(
        "#!/bin/sh\n"
        f"if [ -e {broken} ]; then echo 'bwrap: No permissions to create new namespace' >&2; "
        "exit 1; fi\n"
        f'case "$*" in *repository.git*) touch {broken}; '
        'echo "bwrap: Can\'t mount tmpfs: EPERM" >&2; exit 1;; esac\n'
        f'exec {bwrap} "$@"\n'
    )
    flaky.chmod(0o755)
    settings = worker_settings(
        tmp_path,
        repos,
        rein_aharness_metrics_address="127.0.0.1:0",
        rein_aharness_bwrap=flaky,
    )
    run_id = await activity_core.granted_run("brief")

    def reopened_and_then_held_back(text: str) -> bool:
        skipped = _by(text, "ops_worker_turns_skipped_total", "reason")
        return _ran("failed_reopen", 1)(text) and skipped.get("sandbox_unavailable", 0) >= 2

    scraped = await _scrape_while_running(
        settings, activity_core, caplog, until=reopened_and_then_held_back
    )

    assert scraped.code == ExitCode.CLEAN
    row = await activity_core.row(run_id)
    assert (row["state"], row["attempt"]) == ("open", 1)  # reopened, and not claimed again
    text = scraped.text
    assert _by(text, "ops_worker_runs_total", "outcome") == {
        **_zeros(*RUN_OUTCOMES),
        "failed_reopen": 1.0,
    }
    assert _by(text, "ops_worker_execution_failures_total", "reason") == {
        **_zeros(*FAILURE_REASONS),
        "sandbox_failed": 1.0,
    }
    closes = _by(text, "ops_worker_closes_total", "path", "result")
    assert {key: value for key, value in closes.items() if value} == {"outbox/reopened": 1.0}
    assert _by(text, "ops_worker_claims_total", "result")["claimed"] == 1.0
    skipped = _by(text, "ops_worker_turns_skipped_total", "reason")
    assert skipped["replay_stopped"] == 0.0
    assert skipped["sandbox_unavailable"] >= 2
    assert _by(text, "ops_worker_execution_duration_seconds_count", "selection")["profiled"] == 1


async def test_a_close_left_pending_and_delivered_by_a_later_replay_is_counted(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    """A close an earlier turn (or process) could not deliver is delivered by the next
    replay pass: ops_worker_closes_total counted it as pending then, so the replay
    counter is where its delivery shows."""
    repos.make()
    settings = worker_settings(tmp_path, repos)
    await activity_core.seeded.run(labels=["earlier"], harness_profile_ref=None)
    [run] = await activity_core.claim_as_worker("earlier")
    pending_complete(outbox(settings), run["id"], result={"ok": True}, attempt=run["attempt"])

    runtime = await run_worker_once(settings, RecordingTransport(activity_core.transport()))

    with serve_metrics(runtime.metrics.registry, "127.0.0.1", 0) as (host, port):
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://{host}:{port}/metrics")).text
    replays = _by(text, "ops_worker_outbox_replays_total", "outcome")
    assert replays == {**_zeros(*REPLAY_OUTCOMES), "delivered": 1.0}
    assert (await activity_core.row(uuid.UUID(run["id"])))["state"] == "succeeded"


@pytest.mark.parametrize(
    "sent", [b"", b"GET /metrics HTTP/1.1\r\nHost: x"], ids=["nothing", "half"]
)
async def test_a_silent_scrape_connection_is_closed_and_scrapes_still_answer(
    store: OutboxStore, sent: bytes
) -> None:
    """A thread per connection: one that stops sending is closed after the read timeout
    instead of holding its thread for ever."""
    registry = WorkerMetrics(store).registry
    with serve_metrics(registry, "127.0.0.1", 0, read_timeout_seconds=0.5) as (host, port):
        async with anyio.create_task_group() as group:
            closed_after: list[float] = []

            async def silent() -> None:
                closed_after.append(
                    await anyio.to_thread.run_sync(seconds_until_closed, host, port, sent, 10.0)
                )

            group.start_soon(silent)
            async with httpx.AsyncClient() as http:
                answer = await http.get(f"http://{host}:{port}/metrics")
    assert answer.status_code == 200
    assert 0.4 <= closed_after[0] < 5
