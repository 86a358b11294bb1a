"""Connections the server kills: 503 `unavailable` (the documented body, Retry-After) or,
where the first try cannot have changed anything, the same answer as without the kill;
never a 500, never a claim leased twice or a close applied twice (db/unavailable.py).

The app's pool names its sessions `activity-core` (db/pool.py): these tests find them
in pg_stat_activity by that name, within their own test database, and terminate them.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from ac_testkit import (
    OPERATOR_TOKEN,
    WORKER_ID,
    WORKER_TOKEN,
    AppClient,
    SeededQueue,
    running_app,
    settings_env,
)
from activity_core.db.pool import APPLICATION_NAME
from activity_core.db.unavailable import Step, Unit, is_unavailable, may_run_again
from activity_core.http.app import create_app
from activity_core.settings import load_settings
from ops_contracts import ErrorBody, RefusalCode

WORKER = {"Authorization": f"Bearer {WORKER_TOKEN}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}

# The app's sessions in this test's database (never another test's, nor this one's own).
APP_SESSIONS = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = $1
      AND pid <> pg_backend_pid() AND ($2::text IS NULL OR state = $2)
"""
KILL = f"SELECT count(pg_terminate_backend(pid)) FROM ({APP_SESSIONS}) AS app"
KILL_AND_WAIT = f"SELECT count(pg_terminate_backend(pid, 5000)) FROM ({APP_SESSIONS}) AS app"
WAITING_ON_A_LOCK = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = $1
      AND wait_event_type = 'Lock' AND NOT (pid = ANY($2::int[]))
"""


def assert_unavailable(response: httpx.Response, what: str = "") -> None:
    assert response.status_code == 503, f"{what}: {response.status_code} {response.text}"
    assert ErrorBody.model_validate_json(response.content).code == RefusalCode.unavailable
    assert response.headers["retry-after"] == "1", what


async def waiting_backend(db: asyncpg.Connection, *, besides: list[int] | None = None) -> int:
    """The app's session that waits on a lock (a request in flight), once there is one."""
    for _ in range(500):
        pid = await db.fetchval(WAITING_ON_A_LOCK, APPLICATION_NAME, besides or [])
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.01)
    raise AssertionError("no request of the app waited on the lock")


async def kill(db: asyncpg.Connection, pid: int) -> None:
    assert await db.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)


@asynccontextmanager
async def holding(db_dsn: str, statement: str, *args: Any) -> AsyncIterator[None]:
    """A lock, held by another session until the block ends."""
    locker = await asyncpg.connect(db_dsn)
    try:
        async with locker.transaction():
            await locker.execute(statement, *args)
            yield
    finally:
        await locker.close()


@pytest.fixture(params=["fast-path", "routes"])
async def door(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[AppClient]:
    async with running_app(db_dsn, worker_fast_path=request.param == "fast-path") as client:
        yield client


async def claimed_run(seeded: SeededQueue) -> uuid.UUID:
    lease = datetime.now(UTC) + timedelta(minutes=10)
    return await seeded.run(state="claimed", claim_owner=WORKER_ID, lease_until=lease, attempt=1)


async def test_the_pool_names_its_sessions(api: AppClient, db: asyncpg.Connection) -> None:
    assert (await api.http.get("/ops-runs", headers=OPERATOR)).status_code == 200
    assert await db.fetch(APP_SESSIONS, APPLICATION_NAME, None)


# -- one request cut off in flight ------------------------------------------------------------


@pytest.mark.parametrize("path", ["/ops-runs/{run}", "/ops-runs?limit=5"])
async def test_a_read_cut_off_in_flight_runs_again(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, db_dsn: str, path: str
) -> None:
    run = await seeded.run()
    async with holding(db_dsn, "LOCK TABLE ops_runs IN ACCESS EXCLUSIVE MODE"):
        read = asyncio.create_task(api.http.get(path.format(run=run), headers=OPERATOR))
        first = await waiting_backend(db)
        await kill(db, first)
        # the read runs again on a fresh connection, and waits for the lock again
        await waiting_backend(db, besides=[first])
    response = await read
    assert response.status_code == 200, response.text


async def test_a_transaction_cut_off_before_commit_runs_again(
    door: AppClient, seeded: SeededQueue, db: asyncpg.Connection, db_dsn: str
) -> None:
    """A heartbeat and a reopening failure lock their row in a transaction: lost before
    COMMIT, nothing committed, so they run again and answer as if nothing happened."""
    beat, reopen = await claimed_run(seeded), await claimed_run(seeded)
    lease_before = (await seeded.row(beat))["lease_until"]
    cases: list[tuple[object, str, dict[str, Any]]] = [
        (beat, "heartbeat", {"lease_seconds": 3600}),
        (reopen, "fail", {"error": "flaky", "reopen": True}),
    ]
    for run, action, body in cases:
        lock = "SELECT 1 FROM ops_runs WHERE id = $1 FOR UPDATE"
        async with holding(db_dsn, lock, run):
            request = asyncio.create_task(
                door.http.post(
                    f"/ops-runs/{run}/{action}",
                    json={"worker_id": WORKER_ID, "attempt": 1, **body},
                    headers=WORKER,
                )
            )
            first = await waiting_backend(db)
            await kill(db, first)
            await waiting_backend(db, besides=[first])
        response = await request
        assert response.status_code == 200, f"{action}: {response.text}"
    assert (await seeded.row(beat))["lease_until"] > lease_before + timedelta(minutes=30)
    reopened = await seeded.row(reopen)
    assert (reopened["state"], reopened["attempt"], reopened["claim_owner"]) == ("open", 1, None)


async def test_a_claim_cut_off_in_flight_is_a_503_and_is_not_repeated(
    door: AppClient, seeded: SeededQueue, db: asyncpg.Connection, db_dsn: str
) -> None:
    """The claim statement commits on its own: sent and unanswered, it may have leased
    runs, so it is not run again (a second run would lease others). Here it had not."""
    run = await seeded.run()
    async with holding(db_dsn, "LOCK TABLE ops_runs IN ACCESS EXCLUSIVE MODE"):
        claim = asyncio.create_task(door.claim(limit=1))
        await kill(db, await waiting_backend(db))
        assert_unavailable(await claim, "claim")
        # nothing waits on the lock any more: the claim was not sent again
        assert await db.fetchval(WAITING_ON_A_LOCK, APPLICATION_NAME, []) is None
    row = await seeded.row(run)
    assert (row["state"], row["attempt"]) == ("open", 0)
    again = await door.claim(limit=1)
    assert again.status_code == 200, again.text
    assert [(r["id"], r["attempt"]) for r in again.json()["runs"]] == [(str(run), 1)]


async def test_a_close_cut_off_in_flight_is_a_503_and_the_workers_repeat_closes_once(
    door: AppClient, seeded: SeededQueue, db: asyncpg.Connection, db_dsn: str
) -> None:
    run = await claimed_run(seeded)
    body = {"worker_id": WORKER_ID, "attempt": 1, "result": {"ok": True}}
    async with holding(db_dsn, "SELECT 1 FROM ops_runs WHERE id = $1 FOR UPDATE", run):
        close = asyncio.create_task(
            door.http.post(f"/ops-runs/{run}/complete", json=body, headers=WORKER)
        )
        await kill(db, await waiting_backend(db))
        assert_unavailable(await close, "complete")
        assert await db.fetchval(WAITING_ON_A_LOCK, APPLICATION_NAME, []) is None
    assert (await seeded.row(run))["state"] == "claimed"
    dispositions = []
    for _ in range(2):
        response = await door.http.post(f"/ops-runs/{run}/complete", json=body, headers=WORKER)
        assert response.status_code == 200, response.text
        dispositions.append(response.json()["close_disposition"])
    assert dispositions == ["applied", "reconciled"]


# -- idle connections killed between requests ---------------------------------------------------


async def test_idle_connections_killed_between_requests(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    """Kill every idle session of the pool (a restart, a failover, a proxy's idle timeout),
    then: the next request is answered (the pool reconnects, or the unit runs again) or is
    a 503, and the one after is answered."""
    runs = await seeded.runs(6)
    requests: list[tuple[str, Callable[[], Any]]] = [
        ("get", lambda: api.http.get(f"/ops-runs/{runs[0]}", headers=OPERATOR)),
        ("list", lambda: api.http.get("/ops-runs", headers=OPERATOR)),
        ("summary", lambda: api.http.get("/ops/runs/summary", headers=OPERATOR)),
        ("claim", lambda: api.claim(limit=1)),
        ("expire-leases", lambda: api.http.post("/ops-runs/expire-leases", headers=OPERATOR)),
    ]
    killed = 0
    for name, send in requests:
        assert (await send()).status_code == 200, name  # the pool has a connection
        killed += await db.fetchval(KILL_AND_WAIT, APPLICATION_NAME, "idle")
        first = await send()
        if first.status_code != 200:
            assert_unavailable(first, name)
        second = await send()
        assert second.status_code == 200, f"{name}: {second.text}"
    assert killed >= len(requests)


# -- killing under load, against the app served over TCP ------------------------------------------


@asynccontextmanager
async def served(db_dsn: str, **env: Any) -> AsyncIterator[str]:
    """The app under uvicorn, on its own event loop in a thread, at a free local port."""
    app = create_app(load_settings(**settings_env(**env)), dsn=db_dsn)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", ws="none", http="h11", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(400):
        if server.started:
            break
        assert thread.is_alive(), "uvicorn stopped"
        await asyncio.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 15)
        sock.close()


@dataclass
class Ledger:
    statuses: Counter[int] = field(default_factory=Counter)
    by_request: Counter[tuple[str, int]] = field(default_factory=Counter)
    claims: list[tuple[str, int]] = field(default_factory=list)
    # (run id, attempt, disposition) of every close answered 200
    closes: list[tuple[str, int, str]] = field(default_factory=list)
    undocumented: list[str] = field(default_factory=list)

    def record(self, what: str, response: httpx.Response) -> httpx.Response:
        self.statuses[response.status_code] += 1
        self.by_request[(what, response.status_code)] += 1
        if response.status_code >= 400:
            try:
                ErrorBody.model_validate_json(response.content)
            except ValueError:
                self.undocumented.append(f"{what}: {response.status_code} {response.text[:200]}")
            if response.status_code == 503 and response.headers.get("retry-after") != "1":
                self.undocumented.append(f"{what}: 503 without Retry-After")
        return response


async def work(http: httpx.AsyncClient, ledger: Ledger, stop: asyncio.Event, seed: int) -> None:
    """A worker: claim one run, heartbeat it, then complete it, or fail it with reopen
    (the locking close); a close answered 503 is sent again, as rein-aharness does."""
    pick = random.Random(seed)
    while not stop.is_set():
        claim = ledger.record(
            "claim",
            await http.post(
                "/ops-runs/claim",
                json={"worker_id": WORKER_ID, "limit": 1, "lease_seconds": 300},
                headers=WORKER,
            ),
        )
        if claim.status_code != 200 or not claim.json()["runs"]:
            await asyncio.sleep(0.01)
            continue
        run = claim.json()["runs"][0]
        ledger.claims.append((run["id"], run["attempt"]))
        me = {"worker_id": WORKER_ID, "attempt": run["attempt"]}
        ledger.record(
            "heartbeat",
            await http.post(f"/ops-runs/{run['id']}/heartbeat", json=me, headers=WORKER),
        )
        if pick.random() < 0.3:
            action, body = "fail", {**me, "error": "flaky", "reopen": True}
        else:
            action, body = "complete", {**me, "result": {"ok": True, "path": f"p/{run['id']}"}}
        for _ in range(50):
            close = ledger.record(
                action,
                await http.post(f"/ops-runs/{run['id']}/{action}", json=body, headers=WORKER),
            )
            if close.status_code != 503:
                break
            await asyncio.sleep(0.02)
        if close.status_code == 200:
            ledger.closes.append((run["id"], run["attempt"], close.json()["close_disposition"]))


async def read(http: httpx.AsyncClient, ledger: Ledger, stop: asyncio.Event, run: str) -> None:
    while not stop.is_set():
        for what, path in [
            ("list", "/ops-runs?limit=20"),
            ("get", f"/ops-runs/{run}"),
            ("summary", "/ops/runs/summary"),
            ("automations", "/ops/automations"),
        ]:
            ledger.record(what, await http.get(path, headers=OPERATOR))


async def killing(db: asyncpg.Connection, stop: asyncio.Event, killed: list[int]) -> None:
    while not stop.is_set():
        killed.append(await db.fetchval(KILL, APPLICATION_NAME, None))
        await asyncio.sleep(0.08)


async def every_endpoint_answers(http: httpx.AsyncClient, run: str, failed: str) -> None:
    """Each kind of request, once, after the killing stopped: all 2xx."""
    claim = await http.post(
        "/ops-runs/claim", json={"worker_id": WORKER_ID, "limit": 1}, headers=WORKER
    )
    assert claim.status_code == 200, claim.text
    (claimed,) = claim.json()["runs"]
    me = {"worker_id": WORKER_ID, "attempt": claimed["attempt"]}
    answers = [
        await http.post(f"/ops-runs/{claimed['id']}/heartbeat", json=me, headers=WORKER),
        await http.post(
            f"/ops-runs/{claimed['id']}/complete", json={**me, "result": {}}, headers=WORKER
        ),
        await http.get("/ops-runs", headers=OPERATOR),
        await http.get(f"/ops-runs/{run}", headers=OPERATOR),
        await http.post("/ops-runs/expire-leases", headers=OPERATOR),
        await http.post(f"/ops-runs/{run}/cancel", json={"reason": "done"}, headers=OPERATOR),
        await http.post(f"/ops-runs/{failed}/requeue", headers=OPERATOR),
        await http.get("/ops/runs/summary", headers=OPERATOR),
        await http.get("/ops/audit", headers=OPERATOR),
        await http.get("/ops/automations", headers=OPERATOR),
        await http.get("/readyz"),
    ]
    for answer in answers:
        assert 200 <= answer.status_code < 300, f"{answer.request.url}: {answer.text}"


async def test_killing_the_pools_sessions_under_load_is_never_a_500(
    db_dsn: str, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    runs = await seeded.runs(400)
    spare, failed = await seeded.run(), await seeded.run(state="failed", attempt=1)
    ledger, stop = Ledger(), asyncio.Event()
    killed: list[int] = []
    async with (
        served(db_dsn, ACTIVITY_CORE_DB_POOL_MIN=1, ACTIVITY_CORE_DB_POOL_MAX=3) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        load = [asyncio.create_task(work(http, ledger, stop, n)) for n in range(8)]
        load += [asyncio.create_task(read(http, ledger, stop, str(runs[-1]))) for _ in range(2)]
        killer = asyncio.create_task(killing(db, stop, killed))
        await asyncio.sleep(4)
        stop.set()
        await asyncio.gather(killer, *load)
        # the pool has noticed its last killed sessions; then everything answers again
        await asyncio.sleep(0.5)
        await every_endpoint_answers(http, str(spare), str(failed))

    print(f"killed {sum(killed)} sessions; answers {dict(ledger.by_request)}")
    assert sum(killed) > 0
    assert ledger.statuses[500] == 0, ledger.statuses
    assert all(s < 300 or 400 <= s < 500 or s == 503 for s in ledger.statuses), ledger.statuses
    assert not ledger.undocumented, ledger.undocumented
    assert ledger.statuses[200] > 0

    # No lease handed out twice: a run's attempt is answered to one claim only.
    assert len(ledger.claims) == len(set(ledger.claims))
    # No claim closed twice: per claim (run, attempt), one close that changed the row at
    # most (an exact repeat is `reconciled`).
    changed = Counter((r, a) for r, a, how in ledger.closes if how != "reconciled")
    assert max(changed.values(), default=0) <= 1, changed
    rows = {
        str(r["id"]): r
        for r in await db.fetch("SELECT id, state, attempt, claim_owner, result FROM ops_runs")
    }
    for run_id, attempt in ledger.claims:
        assert rows[run_id]["attempt"] >= attempt
    for run_id, attempt, how in ledger.closes:
        row = rows[run_id]
        if how != "reopened" and row["result"] and "path" in row["result"]:
            # completed at this attempt: it stayed there, never claimed again
            assert (row["state"], row["attempt"]) == ("succeeded", attempt), (run_id, row)
            assert row["result"]["path"] == f"p/{run_id}"


# -- the rule itself ----------------------------------------------------------------------------


def test_what_counts_as_a_lost_database() -> None:
    lost = [
        ConnectionResetError(),
        ConnectionRefusedError(),
        TimeoutError(),
        asyncpg.exceptions.ConnectionDoesNotExistError("closed in the middle of operation"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
        asyncpg.exceptions.CrashShutdownError("crash"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.TooManyConnectionsError("too many clients"),
        asyncpg.exceptions.IdleInTransactionSessionTimeoutError("timeout"),
        asyncpg.exceptions.InterfaceError("connection is closed"),
        asyncpg.exceptions.InterfaceError("cannot perform operation: connection is closed"),
        asyncpg.exceptions.InterfaceError("pool is closing"),
    ]
    not_lost = [
        asyncpg.exceptions.DataError("invalid input for query argument $1"),
        asyncpg.exceptions.InterfaceError("another operation is in progress"),
        asyncpg.exceptions.UniqueViolationError("duplicate key"),
        asyncpg.exceptions.UndefinedTableError("no ops_runs"),
        ValueError("x"),
    ]
    assert [e for e in lost if not is_unavailable(e)] == []
    assert [e for e in not_lost if is_unavailable(e)] == []


def test_when_a_unit_runs_again() -> None:
    sent = asyncpg.exceptions.ConnectionDoesNotExistError("closed in the middle of operation")
    unsent = asyncpg.exceptions.InterfaceError("connection is closed")
    for unit in Unit:
        # nothing was sent yet, or the unit finished (only the release failed: it stands)
        assert may_run_again(unit, Step.acquire, sent)
        assert not may_run_again(unit, Step.done, sent)
    assert may_run_again(Unit.READ, Step.work, sent)
    assert may_run_again(Unit.TRANSACTION, Step.work, sent)
    # COMMIT unanswered: it may have committed
    assert not may_run_again(Unit.TRANSACTION, Step.commit, sent)
    assert not may_run_again(Unit.TRANSACTION, Step.commit, unsent)
    # an autocommit statement: only one that never left
    assert not may_run_again(Unit.STATEMENTS, Step.work, sent)
    assert may_run_again(Unit.STATEMENTS, Step.work, unsent)
    parked = asyncpg.exceptions.InternalClientError(
        "cannot switch to state 12; another operation (2) is in progress"
    )
    assert is_unavailable(parked) and may_run_again(Unit.STATEMENTS, Step.work, parked)
    # a statement that took too long would only take as long again
    for slow in (TimeoutError(), asyncpg.exceptions.QueryCanceledError("statement timeout")):
        assert is_unavailable(slow)
        assert not any(may_run_again(unit, Step.work, slow) for unit in Unit)


# -- a driver failure that reaches the edge untranslated ------------------------------------------


async def test_an_untranslated_driver_failure_is_a_503_not_a_500(db_dsn: str) -> None:
    app = create_app(load_settings(**settings_env()), dsn=db_dsn)
    assert isinstance(app, FastAPI)
    failures: dict[str, Exception] = {
        "admin-shutdown": asyncpg.exceptions.AdminShutdownError("terminating connection"),
        "gone": asyncpg.exceptions.ConnectionDoesNotExistError("closed in the middle"),
        "closed": asyncpg.exceptions.InterfaceError("connection is closed"),
        "reset": ConnectionResetError("reset by peer"),
        "data": asyncpg.exceptions.DataError("invalid input for query argument $1"),
    }

    async def fail(kind: str) -> None:
        raise failures[kind]

    app.add_api_route("/test-only/fail/{kind}", fail)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        for kind in ("admin-shutdown", "gone", "closed", "reset"):
            assert_unavailable(await http.get(f"/test-only/fail/{kind}"), kind)
        bug = await http.get("/test-only/fail/data")
    # a driver failure that is not a lost database is a bug, and says so
    assert bug.status_code == 500
    assert ErrorBody.model_validate_json(bug.content).code == RefusalCode.internal_error
