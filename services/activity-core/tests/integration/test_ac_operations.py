"""Operations: liveness, readiness, Prometheus metrics and what the JSON logs may carry."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import urllib.parse
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ac_testkit import (
    OPERATOR_TOKEN,
    WORKER_ID,
    WORKER_TOKEN,
    AppClient,
    SeededQueue,
    running_app,
)
from activity_core.db.migrate import latest_version
from activity_core.logs import JsonFormatter
from ops_devsupport.processes import free_port


def with_host_port(dsn: str, port: int) -> str:
    parts = urllib.parse.urlsplit(dsn)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class TcpProxy:
    """Forwards one local port to PostgreSQL; stopping it makes the database unreachable."""

    def __init__(self, port: int, upstream: tuple[str, int]) -> None:
        self.port = port
        self.upstream = upstream
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers += [writer, up_writer]
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        dst.close()


# -- health and readiness ----------------------------------------------------------------------


async def test_healthz_answers_while_the_process_is_up(api: AppClient) -> None:
    response = await api.http.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_readyz_reports_the_schema_version_on_a_migrated_database(api: AppClient) -> None:
    response = await api.http.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready", "schema_version": latest_version()}


async def test_readyz_is_503_schema_not_current_on_an_empty_database(empty_dsn: str) -> None:
    async with running_app(empty_dsn) as client:
        response = await client.http.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert body["code"] == "schema_not_current"
        assert str(latest_version()) in body["detail"]
        assert (await client.http.get("/healthz")).status_code == 200


async def test_an_unmigrated_database_is_503_schema_not_current_never_a_500(
    empty_dsn: str,
) -> None:
    async with running_app(empty_dsn) as client:
        claim = await client.claim()
        assert claim.status_code == 503, claim.text
        assert claim.json()["code"] == "schema_not_current"
        assert "activity-core migrate" in claim.json()["detail"]
        listing = await client.http.get("/ops-runs", headers=client.operator_headers())
        assert listing.status_code == 503
        # /metrics still answers: the queue counts are left out, the process counters stay
        metrics = await client.http.get("/metrics")
        assert metrics.status_code == 200, metrics.text
        assert "ops_run_refusals" in metrics.text


async def test_readyz_follows_the_database_away_and_back(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    parts = urllib.parse.urlsplit(db_dsn)
    upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
    port = free_port()
    proxy = TcpProxy(port, upstream)
    caplog.set_level(logging.WARNING, logger="activity_core")

    # Nothing listens yet: the process still starts, says why it is not ready, refuses work.
    async with running_app(with_host_port(db_dsn, port)) as client:
        assert any("database not reachable at start" in r.getMessage() for r in caplog.records)
        assert (await client.http.get("/healthz")).status_code == 200
        ready = await client.http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["code"] == "unavailable"
        claim = await client.claim()
        assert claim.status_code == 503
        assert claim.json()["code"] == "unavailable"
        assert claim.headers["Retry-After"] == "1"
        assert (await client.http.get("/metrics")).status_code == 200

        # The database appears: no restart needed.
        await proxy.start()
        try:
            ready = await client.http.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["schema_version"] == latest_version()
            assert (await client.claim()).status_code == 200
        finally:
            await proxy.stop()

        # ...and goes away again while we run.
        ready = await client.http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["code"] == "unavailable"
        assert "detail" in ready.json()


# -- metrics -------------------------------------------------------------------------------------


async def scrape(api: AppClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await api.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_move_with_claims_closes_refusals_and_expiry(
    app_factory: Any, seeded: SeededQueue
) -> None:
    api: AppClient = await app_factory(OPS_RUN_MAX_ATTEMPTS=2)
    first, second, third = await seeded.runs(3)
    before = await scrape(api)
    assert value(before, "ops_runs", state="open") == 3
    assert value(before, "ops_runs", state="claimed") == 0

    claimed = await api.claim(limit=3)
    assert len(claimed.json()["runs"]) == 3
    after_claim = await scrape(api)
    assert (
        value(after_claim, "ops_runs_claimed_total") - value(before, "ops_runs_claimed_total") == 3
    )
    assert (
        value(after_claim, "ops_run_claim_seconds_count")
        == value(before, "ops_run_claim_seconds_count") + 1
    )
    assert value(after_claim, "ops_run_claim_seconds_bucket", le="+Inf") >= 1
    assert value(after_claim, "ops_runs", state="claimed") == 3

    assert (await api.complete(first, {"ok": True})).status_code == 200
    refused = await api.complete(first, {"ok": False})
    assert refused.json()["code"] == "terminal_conflict"
    reopened = await api.fail(second, error="flaky", reopen=True)
    assert reopened.json()["close_disposition"] == "reopened"
    after_close = await scrape(api)
    assert value(after_close, "ops_run_closes_total", action="complete", disposition="applied") == 1
    assert value(after_close, "ops_run_closes_total", action="fail", disposition="reopened") == 1
    assert value(after_close, "ops_run_refusals_total", code="terminal_conflict") == 1
    assert value(after_close, "ops_run_close_seconds_count") == 2
    assert value(after_close, "ops_run_close_seconds_bucket", le="+Inf") == 2
    assert value(after_close, "ops_runs", state="succeeded") == 1
    assert value(after_close, "ops_runs", state="open") == 1

    # one stale lease below the ceiling of 2 attempts (reopened), one at it (expired)
    [again] = (await api.claim()).json()["runs"]
    assert again["id"] == str(second)
    await seeded.conn.execute("UPDATE ops_runs SET attempt = 1 WHERE id = $1", second)
    await seeded.expire_lease(second)
    await seeded.conn.execute("UPDATE ops_runs SET attempt = 2 WHERE id = $1", third)
    await seeded.expire_lease(third)
    expired = await api.http.post("/ops-runs/expire-leases", headers=api.operator_headers())
    assert expired.json() == {"reopened": 1, "expired": 1}
    after_expiry = await scrape(api)
    assert value(after_expiry, "ops_run_leases_ended_total", outcome="reopened") == 1
    assert value(after_expiry, "ops_run_leases_ended_total", outcome="expired") == 1
    assert value(after_expiry, "ops_runs", state="expired") == 1


# -- logs ----------------------------------------------------------------------------------------

TOOL_OUTPUT = "tool-output-that-must-never-be-logged-4c1d"
ERROR_TEXT = "provider said: private-failure-detail-93ab"
PATH_VALUE = "briefs/private-path-value-1e7f.md"


async def test_queue_log_lines_carry_ids_and_never_secrets_or_result_values(
    api: AppClient, seeded: SeededQueue, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    done, failed, stale = await seeded.runs(3)
    assert (await api.claim(limit=3)).status_code == 200
    result = {"ok": True, "path": PATH_VALUE, "tool_output": TOOL_OUTPUT}
    assert (await api.complete(done, result)).status_code == 200
    assert (await api.complete(done, {**result, "ok": False})).status_code == 409
    assert (await api.fail(failed, error=ERROR_TEXT, result=result)).status_code == 200
    await seeded.expire_lease(stale)
    assert (
        await api.http.post("/ops-runs/expire-leases", headers=api.operator_headers())
    ).status_code == 200
    # refusals at the edge, with secrets in the headers and the body
    await api.http.post(
        "/ops-runs/claim",
        json={"worker_id": WORKER_TOKEN},
        headers={"Authorization": f"Bearer {WORKER_TOKEN}"},
    )
    await api.http.post(
        "/ops-runs/claim",
        json={"worker_id": WORKER_ID},
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
    )
    await api.http.post(
        f"/ops-runs/{done}/complete",
        json={"worker_id": WORKER_ID, "result": {"x": TOOL_OUTPUT}, "extra": TOOL_OUTPUT},
        headers=api.worker_headers(),
    )

    formatter = JsonFormatter()
    lines = [json.loads(formatter.format(record)) for record in caplog.records]
    text = "\n".join(formatter.format(record) for record in caplog.records)
    for secret in (WORKER_TOKEN, OPERATOR_TOKEN, TOOL_OUTPUT, ERROR_TEXT, PATH_VALUE):
        assert secret not in text, secret

    queue_lines = [line for line in lines if line["logger"] == "activity_core.queue"]
    assert queue_lines
    for line in queue_lines:
        assert line.get("run_id"), line
        assert line.get("worker_id"), line
    claims = [line for line in queue_lines if line["message"] == "run claimed"]
    assert {line["run_id"] for line in claims} == {str(done), str(failed), str(stale)}
    assert all(line["worker_id"] == WORKER_ID for line in claims)
    closes = {line["message"]: line for line in queue_lines if line.get("disposition")}
    assert closes["run complete applied"]["run_id"] == str(done)
    assert closes["run fail applied"]["run_id"] == str(failed)
    assert all(line["worker_id"] == WORKER_ID for line in closes.values())
    [ended] = [line for line in queue_lines if line["message"].startswith("stale lease")]
    assert ended["run_id"] == str(stale)
    assert ended["worker_id"] == WORKER_ID
