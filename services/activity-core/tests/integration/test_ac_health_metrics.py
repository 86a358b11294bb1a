"""The metrics the alerts stand on (deploy/k8s/components/monitoring): the age of the oldest
unfinished run, every HTTP answer by route template and status, and the lease-expiry
counter exported from the start."""

from __future__ import annotations

import asyncio
import socket
import urllib.parse
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Route

from ac_testkit import WORKER_ID, AppClient, SeededQueue, running_app
from activity_core.http.request_metrics import RequestMetrics
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.run_ages import RunAges

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(api: AppClient) -> Samples:
    response = await api.http.get("/metrics")
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def requests(samples: Samples, route: str, status: int, method: str = "POST") -> float:
    labels = tuple(sorted({"method": method, "route": route, "status": str(status)}.items()))
    return samples.get(("ops_http_requests_total", labels), 0.0)


def ago(**delta: float) -> datetime:
    return datetime.now().astimezone() - timedelta(**delta)


# -- the oldest unfinished run -------------------------------------------------------------------


async def test_the_oldest_open_and_claimed_runs_ages_are_read_from_the_queue(
    pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    metrics = QueueMetrics()
    ages = RunAges(pool, metrics=metrics)
    assert await ages.refresh() == {"open": 0.0, "claimed": 0.0}

    await seeded.run(created_at=ago(hours=2))
    await seeded.run(created_at=ago(minutes=5))
    await seeded.run(
        created_at=ago(minutes=30),
        state="claimed",
        claim_owner=WORKER_ID,
        lease_until=ago(minutes=-10),
        attempt=1,
    )
    await seeded.run(created_at=ago(days=3), state="succeeded", attempt=1)  # finished: ignored
    read = await ages.refresh()

    assert 7200 <= read["open"] < 7200 + 60
    assert 1800 <= read["claimed"] < 1800 + 60
    gauge = metrics.registry.get_sample_value
    assert gauge("ops_runs_oldest_age_seconds", {"state": "open"}) == read["open"]
    assert gauge("ops_runs_oldest_age_seconds", {"state": "claimed"}) == read["claimed"]


async def test_each_api_process_exports_the_ages_from_its_start(
    db_dsn: str, seeded: SeededQueue
) -> None:
    await seeded.run(created_at=ago(hours=1))
    async with running_app(db_dsn) as api, asyncio.timeout(10):
        while True:
            samples = await scrape(api)
            age = samples.get(("ops_runs_oldest_age_seconds", (("state", "open"),)))
            if age is not None:
                break
            await asyncio.sleep(0.05)
    assert 3600 <= age < 3600 + 60
    assert samples[("ops_runs_oldest_age_seconds", (("state", "claimed"),))] == 0.0


# -- every HTTP answer, by route template and status ---------------------------------------------


async def test_requests_are_counted_by_route_template_and_status_on_every_door(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run()
    assert (await api.http.get("/healthz")).status_code == 200
    assert (await api.claim()).status_code == 200  # the worker fast path answers
    assert (await api.complete(run_id, {"ok": True})).status_code == 200
    assert (await api.complete(uuid.uuid4(), {"ok": True})).status_code == 404
    assert (await api.http.post("/ops-runs/claim", json={})).status_code == 401  # no credential
    assert (await api.http.get(f"/no/such/{uuid.uuid4()}")).status_code == 404

    samples = await scrape(api)
    assert requests(samples, "/healthz", 200, method="GET") == 1
    assert requests(samples, "/ops-runs/claim", 200) == 1
    assert requests(samples, "/ops-runs/{run_id}/complete", 200) == 1
    assert requests(samples, "/ops-runs/{run_id}/complete", 404) == 1
    assert requests(samples, "/ops-runs/claim", 401) == 1
    assert requests(samples, "unmatched", 404, method="GET") == 1
    routes = {
        dict(labels)["route"] for name, labels in samples if name == "ops_http_requests_total"
    }
    assert not any(str(run_id) in route for route in routes)


async def test_each_route_has_its_latency_and_the_process_its_runtime_metrics(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run()
    assert (await api.claim()).status_code == 200  # the worker fast path answers
    assert (await api.complete(run_id, {"ok": True})).status_code == 200
    assert (await api.http.get("/healthz")).status_code == 200

    samples = await scrape(api)

    def answered(method: str, route: str) -> float:
        labels = tuple(sorted({"method": method, "route": route}.items()))
        count = samples[("ops_http_request_duration_seconds_count", labels)]
        total = samples[("ops_http_request_duration_seconds_sum", labels)]
        assert 0 < total < 30
        return count

    assert answered("POST", "/ops-runs/claim") == 1
    assert answered("POST", "/ops-runs/{run_id}/complete") == 1
    assert answered("GET", "/healthz") == 1
    names = {name for name, _ in samples}
    # the process and the runtime: CPU, memory, open files, GC, the Python version
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_gc_collections_total",
        "python_info",
    ):
        assert name in names, name


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_database_outage_is_counted_as_5xx_of_the_routes_it_hit(db_dsn: str) -> None:
    parts = urllib.parse.urlsplit(db_dsn)
    user = parts.netloc.rpartition("@")[0]
    host = f"127.0.0.1:{_unused_port()}"
    away = urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))
    async with running_app(away) as api:
        assert (await api.claim()).status_code == 503
        assert (await api.http.get("/readyz")).status_code == 503
        samples = await scrape(api)
    assert requests(samples, "/ops-runs/claim", 503) == 1
    assert requests(samples, "/readyz", 503, method="GET") == 1


# -- lease expiries are exported from the start ------------------------------------------------


@pytest.mark.parametrize("outcome", ["reopened", "expired"])
async def test_lease_expiries_are_exported_at_zero_before_the_first(
    api: AppClient, outcome: str
) -> None:
    samples = await scrape(api)
    assert samples[("ops_run_leases_ended_total", (("outcome", outcome),))] == 0.0


async def test_an_unanswered_exception_is_counted_as_500() -> None:
    """An exception no handler answers: Starlette's server-error middleware answers 500
    outside this middleware, which must count it as that 500."""

    async def broken(request: Any) -> Any:
        raise RuntimeError("a bug")

    metrics = QueueMetrics()
    app = Starlette(routes=[Route("/broken/{part}", broken)])
    app.add_middleware(RequestMetrics, metrics=metrics, routers=())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/broken/x")).status_code == 500
    counted = metrics.registry.get_sample_value(
        "ops_http_requests_total", {"method": "GET", "route": "/broken/{part}", "status": "500"}
    )
    assert counted == 1
