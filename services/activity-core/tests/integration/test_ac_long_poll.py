"""Long-poll claims wake on LISTEN/NOTIFY, never by polling the table."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx

from ac_testkit import AppClient, SeededQueue
from activity_core.queue.wakeups import LISTENER_APPLICATION_NAME, OpenRunSignal


async def waiting_claim(api: AppClient, settle: float, **body: Any) -> asyncio.Task[httpx.Response]:
    """A long-poll claim started, and `settle` seconds for it to reach its wait."""
    waiting = asyncio.create_task(api.claim(**body))
    await asyncio.sleep(settle)
    return waiting


async def test_a_waiting_claim_wakes_when_a_run_is_emitted(
    api: AppClient, seeded: SeededQueue
) -> None:
    await seeded.definition()
    started = time.monotonic()
    waiting = await waiting_claim(api, 0.5, wait_seconds=10)
    assert not waiting.done()
    run_id = await seeded.run()
    response = await asyncio.wait_for(waiting, 5)
    elapsed = time.monotonic() - started
    assert [run["id"] for run in response.json()["runs"]] == [str(run_id)]
    assert elapsed < 5


async def test_a_waiting_claim_wakes_when_a_failure_reopens(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run()
    await api.claim()
    waiting = await waiting_claim(api, 0.3, wait_seconds=10)
    assert not waiting.done()
    reopened = await api.fail(run_id, error="retry me", reopen=True)
    assert reopened.json()["close_disposition"] == "reopened"
    response = await asyncio.wait_for(waiting, 5)
    [run] = response.json()["runs"]
    assert (run["id"], run["attempt"]) == (str(run_id), 2)


async def test_a_waiting_claim_ignores_runs_it_does_not_match(
    api: AppClient, seeded: SeededQueue
) -> None:
    await seeded.definition()
    started = time.monotonic()
    waiting = await waiting_claim(api, 0.3, wait_seconds=2, labels=["wanted"])
    await seeded.run(labels=["unwanted"])
    response = await waiting
    assert response.json()["runs"] == []
    assert time.monotonic() - started >= 1.9


async def test_wait_ends_empty_at_the_deadline(api: AppClient) -> None:
    started = time.monotonic()
    response = await api.claim(wait_seconds=1)
    elapsed = time.monotonic() - started
    assert response.json() == {"runs": []}
    assert 0.9 <= elapsed < 3


async def test_waiting_does_not_poll_the_database(api: AppClient, seeded: SeededQueue) -> None:
    """A 2 s wait with nothing emitted runs the claim transaction once, not in a loop."""
    await seeded.definition()
    count_before = _claim_transactions(api)
    response = await api.claim(wait_seconds=2)
    assert response.json()["runs"] == []
    assert _claim_transactions(api) - count_before == 1


def _claim_transactions(api: AppClient) -> float:
    registry = api.app.state.metrics.registry
    value = registry.get_sample_value("ops_run_claim_seconds_count")
    return float(value or 0)


async def test_long_poll_recovers_when_the_listener_connection_is_killed(
    api: AppClient, seeded: SeededQueue
) -> None:
    await seeded.definition()
    killed = await seeded.conn.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = $1 AND datname = current_database()",
        LISTENER_APPLICATION_NAME,
    )
    assert killed == 1
    for _ in range(50):  # the listener reconnects after its back-off (1 s)
        await asyncio.sleep(0.1)
        back = await seeded.conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
            "AND datname = current_database()",
            LISTENER_APPLICATION_NAME,
        )
        if back:
            break
    waiting = await waiting_claim(api, 0.3, wait_seconds=10)
    run_id = await seeded.run()
    response = await asyncio.wait_for(waiting, 5)
    assert [run["id"] for run in response.json()["runs"]] == [str(run_id)]


async def test_shutdown_drain_ends_waiting_claims_with_an_empty_answer(
    api: AppClient, seeded: SeededQueue
) -> None:
    await seeded.definition()
    started = time.monotonic()
    waiting = await waiting_claim(api, 0.3, wait_seconds=15)
    api.app.state.queue.drain_long_polls()
    response = await asyncio.wait_for(waiting, 5)
    assert response.status_code == 200
    assert response.json() == {"runs": []}
    assert time.monotonic() - started < 5
    # and a claim arriving while draining does not wait at all
    quick = time.monotonic()
    assert (await api.claim(wait_seconds=15)).json() == {"runs": []}
    assert time.monotonic() - quick < 3


async def test_start_does_not_wait_out_the_first_listen_when_the_database_is_down() -> None:
    """With the database down the first LISTEN fails at once; start-up goes on then (the
    process answers /healthz), rather than after the first-listen timeout."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    signal = OpenRunSignal(
        f"postgresql://postgres@127.0.0.1:{port}/none", first_listen_timeout=3600
    )
    try:
        await asyncio.wait_for(signal.start(), 60)
    finally:
        await signal.stop()
