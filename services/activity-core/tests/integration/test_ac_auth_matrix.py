"""The auth matrix: who may call which endpoint, and that a refusal changes no row.

Worker endpoints (claim, heartbeat, complete, fail) take a worker token bound to one worker
id; operator endpoints (list, get, expire-leases) take the operator token. Each kind of
credential is refused on the other kind's endpoints, and there is no implicit open mode.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, AppClient, SeededQueue

WORKER_ENDPOINTS = ("claim", "heartbeat", "complete", "fail")
OPERATOR_ENDPOINTS = ("list", "get", "expire-leases")
UNKNOWN_TOKEN = "not-a-configured-token-0123456789"
OTHER_WORKER = "rein-aharness@other02"
WORKER_HEADERS = ("bearer", "x-worker-token")
OPERATOR_HEADERS = ("bearer", "x-operator-token")

# Every variable that could open or configure auth; the unauth tests must not inherit one.
AUTH_VARIABLES = (
    "ACTIVITY_CORE_OPERATOR_TOKEN",
    "ACTIVITY_CORE_WORKER_TOKEN",
    "ACTIVITY_CORE_WORKER_ID",
    "ACTIVITY_CORE_WORKER_CREDENTIALS_FILE",
    "ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS",
)
NO_CREDENTIALS: dict[str, Any] = {
    "ACTIVITY_CORE_OPERATOR_TOKEN": None,
    "ACTIVITY_CORE_WORKER_TOKEN": None,
    "ACTIVITY_CORE_WORKER_ID": None,
}


@dataclass(frozen=True)
class Rows:
    open: uuid.UUID
    claimed: uuid.UUID  # held by WORKER_ID with a live lease
    stale: uuid.UUID  # held by WORKER_ID, lease ended: what expire-leases would reopen


async def seed_rows(seeded: SeededQueue, owner: str = WORKER_ID) -> Rows:
    return Rows(
        open=await seeded.run(),
        claimed=await seeded.claimed(timedelta(hours=1), owner=owner),
        stale=await seeded.claimed(timedelta(minutes=-5), owner=owner),
    )


async def snapshot(db: asyncpg.Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM ops_runs ORDER BY id")]


def worker_call(endpoint: str, run_id: uuid.UUID, worker_id: str) -> tuple[str, dict[str, Any]]:
    if endpoint == "claim":
        return "/ops-runs/claim", {"worker_id": worker_id}
    body: dict[str, Any] = {"worker_id": worker_id}
    if endpoint == "complete":
        body["result"] = {"ok": True, "path": "briefs/today.md"}
    elif endpoint == "fail":
        body["error"] = "llm timeout"
    return f"/ops-runs/{run_id}/{endpoint}", body


# An endpoint's call: (client, endpoint, run id, headers=...)
Caller = Callable[..., Awaitable[httpx.Response]]


async def call_worker(
    http: httpx.AsyncClient,
    endpoint: str,
    run_id: uuid.UUID,
    *,
    worker_id: str = WORKER_ID,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    path, body = worker_call(endpoint, run_id, worker_id)
    return await http.post(path, json=body, headers=headers or {})


async def call_operator(
    http: httpx.AsyncClient,
    endpoint: str,
    run_id: uuid.UUID,
    *,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    if endpoint == "list":
        return await http.get("/ops-runs", headers=headers or {})
    if endpoint == "get":
        return await http.get(f"/ops-runs/{run_id}", headers=headers or {})
    return await http.post("/ops-runs/expire-leases", headers=headers or {})


def worker_header(style: str, token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if style == "bearer" else {"X-Worker-Token": token}


def operator_header(style: str, token: str) -> dict[str, str]:
    if style == "bearer":
        return {"Authorization": f"Bearer {token}"}
    return {"X-Operator-Token": token}


# A plane's header styles, its header of a style, its token and its call of an endpoint
PLANES: dict[str, tuple[tuple[str, ...], Callable[[str, str], dict[str, str]], str, Caller]] = {
    "worker": (WORKER_HEADERS, worker_header, WORKER_TOKEN, call_worker),
    "operator": (OPERATOR_HEADERS, operator_header, OPERATOR_TOKEN, call_operator),
}


async def accepted_through_each_header(
    http: httpx.AsyncClient, seeded: SeededQueue, plane: str, endpoint: str
) -> AsyncIterator[tuple[Rows, httpx.Response]]:
    """For each of the plane's header styles in turn: fresh rows, `endpoint` called on the
    claimed one with the plane's token in that style, answered 200; the rows and the
    answer, checked before the next style's rows are seeded."""
    styles, header, token, call = PLANES[plane]
    for style in styles:
        rows = await seed_rows(seeded)
        response = await call(http, endpoint, rows.claimed, headers=header(style, token))
        assert response.status_code == 200, f"{style}: {response.text}"
        yield rows, response


def assert_refused(response: httpx.Response, status: int, code: str, case: str = "") -> None:
    """`status` with the documented body: `code` and a detail; `case` names the request in
    a failure's message."""
    label = f"{case}: " if case else ""
    assert response.status_code == status, f"{label}{response.text}"
    body = response.json()
    assert body["code"] == code, f"{label}{body}"
    assert isinstance(body["detail"], str)
    assert body["detail"], case


def sha256_digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
def clean_auth_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AUTH_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# -- worker endpoints ------------------------------------------------------------------------

# (case, headers, body worker_id, status, code): every way a worker call is refused
WORKER_REFUSALS: list[tuple[str, dict[str, str], str, int, str]] = [
    ("no credential", {}, WORKER_ID, 401, "unauthenticated"),
    *[
        (
            f"unknown token via {style}",
            worker_header(style, UNKNOWN_TOKEN),
            WORKER_ID,
            401,
            "unauthenticated",
        )
        for style in WORKER_HEADERS
    ],
    *[
        (f"Authorization {value!r}", {"Authorization": value}, WORKER_ID, 401, "unauthenticated")
        for value in ("Basic " + WORKER_TOKEN, "Bearer", "Bearer   ", WORKER_TOKEN)
    ],
    *[
        (
            f"worker token via {style} speaking for another worker",
            worker_header(style, WORKER_TOKEN),
            OTHER_WORKER,
            403,
            "worker_identity_mismatch",
        )
        for style in WORKER_HEADERS
    ],
    *[
        (
            f"operator token via {style}",
            operator_header(style, OPERATOR_TOKEN),
            WORKER_ID,
            403,
            "forbidden",
        )
        for style in OPERATOR_HEADERS
    ],
    *[
        (
            f"operator token via {style}, body naming another worker",
            operator_header(style, OPERATOR_TOKEN),
            OTHER_WORKER,
            403,
            "forbidden",
        )
        for style in OPERATOR_HEADERS
    ],
]


@pytest.mark.parametrize("endpoint", WORKER_ENDPOINTS)
async def test_worker_endpoint_refusals_change_no_row(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, endpoint: str
) -> None:
    # Rows of both workers are live, so each refusal is all that stands between the
    # request and a successful claim/heartbeat/complete/fail.
    mine = await seed_rows(seeded)
    theirs = await seed_rows(seeded, owner=OTHER_WORKER)
    before = await snapshot(db)
    for case, headers, worker_id, status, code in WORKER_REFUSALS:
        run_id = mine.claimed if worker_id == WORKER_ID else theirs.claimed
        response = await call_worker(
            api.http, endpoint, run_id, worker_id=worker_id, headers=headers
        )
        assert_refused(response, status, code, case)
    assert await snapshot(db) == before


@pytest.mark.parametrize("endpoint", WORKER_ENDPOINTS)
async def test_worker_token_acts_through_either_header(
    api: AppClient, seeded: SeededQueue, endpoint: str
) -> None:
    async for rows, response in accepted_through_each_header(api.http, seeded, "worker", endpoint):
        if endpoint == "claim":
            [run] = response.json()["runs"]
            assert run["claim_owner"] == WORKER_ID
            assert (await seeded.row(uuid.UUID(run["id"])))["state"] == "claimed"
            continue
        expected = {"heartbeat": "claimed", "complete": "succeeded", "fail": "failed"}[endpoint]
        assert (await seeded.row(rows.claimed))["state"] == expected
        if endpoint != "heartbeat":
            assert response.json()["close_disposition"] == "applied"


# -- operator endpoints ----------------------------------------------------------------------

OPERATOR_REFUSALS: list[tuple[str, dict[str, str], int, str]] = [
    ("no credential", {}, 401, "unauthenticated"),
    *[
        (
            f"unknown token via {style}",
            operator_header(style, UNKNOWN_TOKEN),
            401,
            "unauthenticated",
        )
        for style in OPERATOR_HEADERS
    ],
    *[
        (f"worker token via {style}", worker_header(style, WORKER_TOKEN), 403, "forbidden")
        for style in WORKER_HEADERS
    ],
]


@pytest.mark.parametrize("endpoint", OPERATOR_ENDPOINTS)
async def test_operator_endpoint_refusals_change_no_row(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, endpoint: str
) -> None:
    rows = await seed_rows(seeded)
    before = await snapshot(db)
    for case, headers, status, code in OPERATOR_REFUSALS:
        response = await call_operator(api.http, endpoint, rows.claimed, headers=headers)
        assert_refused(response, status, code, case)
    assert await snapshot(db) == before


@pytest.mark.parametrize("endpoint", OPERATOR_ENDPOINTS)
async def test_operator_token_acts_through_either_header(
    api: AppClient, seeded: SeededQueue, endpoint: str
) -> None:
    async for rows, response in accepted_through_each_header(
        api.http, seeded, "operator", endpoint
    ):
        body = response.json()
        if endpoint == "list":
            assert {str(rows.open), str(rows.claimed), str(rows.stale)} <= {
                r["id"] for r in body["runs"]
            }
        elif endpoint == "get":
            assert body["id"] == str(rows.claimed)
        else:
            assert body == {"reopened": 1, "expired": 0}
            assert (await seeded.row(rows.stale))["state"] == "open"


# -- no implicit open mode ---------------------------------------------------------------------


async def test_without_any_credential_configured_everything_is_refused_and_the_reason_logged(
    app_factory: Any,
    seeded: SeededQueue,
    db: asyncpg.Connection,
    clean_auth_env: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="activity_core")
    client: AppClient = await app_factory(**NO_CREDENTIALS)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "no worker credentials configured" in w and "ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS" in w
        for w in warnings
    ), warnings
    assert any("ACTIVITY_CORE_OPERATOR_TOKEN" in w and "refused" in w for w in warnings), warnings

    rows = await seed_rows(seeded)
    before = await snapshot(db)
    for endpoint in WORKER_ENDPOINTS:
        for headers in ({}, worker_header("bearer", WORKER_TOKEN)):
            response = await call_worker(client.http, endpoint, rows.claimed, headers=headers)
            assert_refused(response, 401, "unauthenticated")
    for endpoint in OPERATOR_ENDPOINTS:
        for headers in ({}, operator_header("bearer", OPERATOR_TOKEN)):
            response = await call_operator(client.http, endpoint, rows.claimed, headers=headers)
            assert_refused(response, 401, "unauthenticated")
    assert await snapshot(db) == before


async def test_allow_unauth_mutations_opens_the_queue_for_local_development(
    app_factory: Any,
    seeded: SeededQueue,
    clean_auth_env: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="activity_core")
    client: AppClient = await app_factory(
        **NO_CREDENTIALS, ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS="1"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("worker endpoints are open" in w for w in warnings), warnings
    assert any("operator endpoints are open" in w for w in warnings), warnings

    rows = await seed_rows(seeded)
    dev = "dev@laptop"
    claim = await client.http.post("/ops-runs/claim", json={"worker_id": dev, "limit": 5})
    assert claim.status_code == 200, claim.text
    claimed = {r["id"]: r for r in claim.json()["runs"]}
    # the stale row was reopened before the select, so both open rows were claimed
    assert set(claimed) == {str(rows.open), str(rows.stale)}
    assert all(r["claim_owner"] == dev for r in claimed.values())

    beat = await client.http.post(f"/ops-runs/{rows.open}/heartbeat", json={"worker_id": dev})
    assert beat.status_code == 200, beat.text
    done = await client.http.post(
        f"/ops-runs/{rows.open}/complete", json={"worker_id": dev, "result": {"ok": True}}
    )
    assert done.status_code == 200, done.text
    failed = await client.http.post(
        f"/ops-runs/{rows.stale}/fail", json={"worker_id": dev, "error": "gave up"}
    )
    assert failed.status_code == 200, failed.text

    assert (await client.http.get("/ops-runs")).status_code == 200
    assert (await client.http.get(f"/ops-runs/{rows.claimed}")).status_code == 200
    expired = await client.http.post("/ops-runs/expire-leases")
    assert expired.status_code == 200, expired.text
    # an unknown token is still not a credential, even in the open mode
    refused = await client.http.post(
        "/ops-runs/claim", json={"worker_id": dev}, headers=worker_header("bearer", UNKNOWN_TOKEN)
    )
    assert_refused(refused, 401, "unauthenticated")


async def test_allow_unauth_mutations_never_opens_a_kind_of_credential_that_is_configured(
    app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection, clean_auth_env: None
) -> None:
    client: AppClient = await app_factory(ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS="1")
    rows = await seed_rows(seeded)
    before = await snapshot(db)
    for endpoint in WORKER_ENDPOINTS:
        assert_refused(
            await call_worker(client.http, endpoint, rows.claimed), 401, "unauthenticated"
        )
    for endpoint in OPERATOR_ENDPOINTS:
        assert_refused(
            await call_operator(client.http, endpoint, rows.claimed), 401, "unauthenticated"
        )
    assert await snapshot(db) == before


# -- a fleet of workers from a credentials file ------------------------------------------------

WORKER_A, TOKEN_A = "rein-aharness@fleet-a", "fleet-token-a-0123456789abcdef"
WORKER_B, TOKEN_B = "rein-aharness@fleet-b", "fleet-token-b-0123456789abcdef"


@pytest.fixture
def credentials_file(tmp_path: Path) -> Path:
    path = tmp_path / "workers.json"
    path.write_text(
        json.dumps(
            {"workers": {WORKER_A: sha256_digest(TOKEN_A), WORKER_B: sha256_digest(TOKEN_B)}}
        ),
        encoding="utf-8",
    )
    return path


async def test_each_fleet_worker_is_bound_to_its_own_identity(
    app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection, credentials_file: Path
) -> None:
    client: AppClient = await app_factory(
        ACTIVITY_CORE_WORKER_CREDENTIALS_FILE=str(credentials_file)
    )
    run_a, run_b = await seeded.runs(2)
    claim_a = await client.http.post(
        "/ops-runs/claim", json={"worker_id": WORKER_A}, headers=worker_header("bearer", TOKEN_A)
    )
    claim_b = await client.http.post(
        "/ops-runs/claim",
        json={"worker_id": WORKER_B},
        headers=worker_header("x-worker-token", TOKEN_B),
    )
    assert [r["id"] for r in claim_a.json()["runs"]] == [str(run_a)]
    assert [r["id"] for r in claim_b.json()["runs"]] == [str(run_b)]
    assert (await seeded.row(run_a))["claim_owner"] == WORKER_A
    assert (await seeded.row(run_b))["claim_owner"] == WORKER_B

    before = await snapshot(db)
    # A's token cannot speak as B, on any worker endpoint, with either header
    for endpoint in WORKER_ENDPOINTS:
        for style in ("bearer", "x-worker-token"):
            response = await call_worker(
                client.http,
                endpoint,
                run_b,
                worker_id=WORKER_B,
                headers=worker_header(style, TOKEN_A),
            )
            assert_refused(response, 403, "worker_identity_mismatch")
    # B, as itself, still cannot close A's run: that is ownership, not identity
    wrong_owner = await call_worker(
        client.http, "complete", run_a, worker_id=WORKER_B, headers=worker_header("bearer", TOKEN_B)
    )
    assert_refused(wrong_owner, 409, "wrong_owner")
    assert await snapshot(db) == before

    for run_id, worker, token in ((run_a, WORKER_A, TOKEN_A), (run_b, WORKER_B, TOKEN_B)):
        done = await call_worker(
            client.http,
            "complete",
            run_id,
            worker_id=worker,
            headers=worker_header("bearer", token),
        )
        assert done.status_code == 200, done.text
        assert (await seeded.row(run_id))["state"] == "succeeded"


async def test_the_credentials_file_and_the_single_worker_token_work_side_by_side(
    app_factory: Any, seeded: SeededQueue, credentials_file: Path
) -> None:
    client: AppClient = await app_factory(
        ACTIVITY_CORE_WORKER_CREDENTIALS_FILE=str(credentials_file)
    )
    await seeded.runs(2)
    for worker, token in ((WORKER_ID, WORKER_TOKEN), (WORKER_A, TOKEN_A)):
        response = await client.http.post(
            "/ops-runs/claim", json={"worker_id": worker}, headers=worker_header("bearer", token)
        )
        assert response.status_code == 200, response.text
        assert [r["claim_owner"] for r in response.json()["runs"]] == [worker]


def _serve_env(credentials: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACTIVITY_CORE_", "OPS_RUN_", "STATE_HUB_", "TEMPORAL_"))
    }
    # Nothing listens on port 1: reaching the database at all would be a failure of its own.
    env["ACTIVITY_CORE_DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/none"
    env["ACTIVITY_CORE_WORKER_CREDENTIALS_FILE"] = str(credentials)
    return env


BAD_CREDENTIALS = {
    "not-json": '{"workers": ',
    "not-an-object": '["rein-aharness@a"]',
    "no-workers": '{"workers": {}}',
    "plain-token-not-digest": json.dumps({"workers": {WORKER_A: TOKEN_A}}),
    "bad-worker-id": json.dumps({"workers": {"has space": sha256_digest(TOKEN_A)}}),
}


@pytest.mark.parametrize("flags", [[], ["--migrate"]], ids=["serve", "serve-migrate"])
def test_a_malformed_credentials_file_stops_serve_with_one_line(
    tmp_path: Path, flags: list[str]
) -> None:
    credentials = tmp_path / "workers.json"
    credentials.write_text(BAD_CREDENTIALS["not-json"], encoding="utf-8")
    executable = Path(sys.executable).with_name("activity-core")
    completed = subprocess.run(
        [str(executable), "serve", "--port", "1", *flags],
        env=_serve_env(credentials),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode != 0
    assert "Traceback" not in completed.stderr + completed.stdout
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert "ACTIVITY_CORE_WORKER_CREDENTIALS_FILE" in lines[0]
    # checked before the database is touched, even when asked to migrate first
    assert "database" not in lines[0]


@pytest.mark.parametrize(
    "content",
    [*BAD_CREDENTIALS.values(), None],
    ids=[*BAD_CREDENTIALS, "missing-file"],
)
def test_every_malformed_credentials_file_is_one_line_naming_the_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
) -> None:
    # The command's own entry point, in-process (one real process is started above);
    # logging setup is skipped so pytest keeps its handlers.
    from activity_core import cli

    credentials = tmp_path / "workers.json"
    if content is not None:
        credentials.write_text(content, encoding="utf-8")
    for name, value in _serve_env(credentials).items():
        monkeypatch.setenv(name, value)
    for name in AUTH_VARIABLES[:3]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)

    def no_server(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("serve started despite a malformed credentials file")

    monkeypatch.setattr("uvicorn.run", no_server)
    code = cli.main(["serve", "--port", "1"])
    captured = capsys.readouterr()
    assert code != 0
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("activity-core: ACTIVITY_CORE_WORKER_CREDENTIALS_FILE: ")
    assert str(credentials) in lines[0]
    assert TOKEN_A not in captured.err + captured.out


# -- credentials before the body ---------------------------------------------------------------
# A caller without a valid credential for an endpoint is 401/403 whatever its request says:
# path, query or body, malformed or too large. Through both doors to the worker endpoints
# (the fast path hands every malformed request on to the body guard and the routes).

SMALL_LIMIT = 1024
OVERSIZED = json.dumps({"worker_id": WORKER_ID, "pad": "x" * (2 * SMALL_LIMIT)}).encode()
# (case, body, extra headers): every way a body is refused with a valid credential
BAD_BODIES: list[tuple[str, bytes, dict[str, str]]] = [
    ("not JSON", b'{"worker_id": ', {}),
    ("NaN", b'{"worker_id": "' + WORKER_ID.encode() + b'", "limit": NaN}', {}),
    ("nested too deep", b"[" * 100 + b"]" * 100, {}),
    ("not an object", b"[]", {}),
    (
        "wrong types",
        json.dumps(
            {"worker_id": 7, "limit": "1", "result": [], "error": 5, "attempt": 0, "reopen": 1}
        ).encode(),
        {},
    ),
    ("unknown field", json.dumps({"worker_id": WORKER_ID, "surprise": True}).encode(), {}),
    ("empty", b"", {}),
    ("form encoded", b"worker_id=x", {"content-type": "application/x-www-form-urlencoded"}),
    ("text/plain", json.dumps({"worker_id": WORKER_ID}).encode(), {"content-type": "text/plain"}),
    ("over the limit", OVERSIZED, {}),
]
# (case, headers, status, code) for a worker endpoint, then for an operator endpoint
BAD_WORKER_CREDENTIALS: list[tuple[str, dict[str, str], int, str]] = [
    ("no credential", {}, 401, "unauthenticated"),
    ("unknown token", worker_header("bearer", UNKNOWN_TOKEN), 401, "unauthenticated"),
    ("operator token", operator_header("bearer", OPERATOR_TOKEN), 403, "forbidden"),
]
BAD_OPERATOR_CREDENTIALS: list[tuple[str, dict[str, str], int, str]] = [
    ("no credential", {}, 401, "unauthenticated"),
    ("unknown token", operator_header("bearer", UNKNOWN_TOKEN), 401, "unauthenticated"),
    ("worker token", worker_header("bearer", WORKER_TOKEN), 403, "forbidden"),
]


@pytest.fixture(params=["fast path", "routes"])
async def small_bodies(request: pytest.FixtureRequest, app_factory: Any) -> AppClient:
    client: AppClient = await app_factory(
        ACTIVITY_CORE_MAX_BODY_BYTES=SMALL_LIMIT, worker_fast_path=request.param == "fast path"
    )
    return client


def worker_paths(run_id: uuid.UUID) -> list[str]:
    paths = ["/ops-runs/claim"]
    for action in ("heartbeat", "complete", "fail"):
        paths += [
            f"/ops-runs/{run_id}/{action}",
            f"/ops-runs/{str(run_id).upper()}/{action}",
            f"/ops-runs/not-a-uuid/{action}",
        ]
    return paths


async def test_worker_endpoints_check_credentials_before_the_body(
    small_bodies: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    rows = await seed_rows(seeded)
    before = await snapshot(db)
    for path in worker_paths(rows.claimed):
        for case, body, extra in BAD_BODIES:
            # with the right credential the body is what is refused ...
            response = await small_bodies.http.post(
                path,
                content=body,
                headers={
                    "content-type": "application/json",
                    **small_bodies.worker_headers(),
                    **extra,
                },
            )
            assert response.status_code in {413, 422}, f"{path} {case}: {response.text}"
            # ... without it, the credential, whatever the body
            for who, headers, status, code in BAD_WORKER_CREDENTIALS:
                response = await small_bodies.http.post(
                    path,
                    content=body,
                    headers={"content-type": "application/json", **headers, **extra},
                )
                assert response.status_code == status, f"{path} {case} {who}: {response.text}"
                assert response.json()["code"] == code, f"{path} {case} {who}"
    assert await snapshot(db) == before


async def test_operator_endpoints_check_credentials_before_path_query_and_body(
    small_bodies: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    rows = await seed_rows(seeded)
    before = await snapshot(db)
    gets = [
        "/ops-runs?limit=0",
        "/ops-runs?state=bogus&label=has%20space&label=a,b",
        "/ops-runs?cursor=!!&activity_definition_id=nope",
        f"/ops-runs?target_repo={'x' * 300}",
        "/ops-runs/not-a-uuid",
        f"/ops-runs/{str(rows.claimed).upper()}x",
        "/ops/automations/fi-daily-brief/runs?limit=0&cursor=",
        f"/ops/automations/{'x' * 200}/runs",
        f"/ops/automations/fi-daily-brief/runs/{'y' * 300}",
        f"/ops/automations/{'x' * 200}",
    ]
    posts = [
        "/ops-runs/expire-leases",
        "/ops/automations/fi-daily-brief/fire",
        "/ops/automations/fi-daily-brief/pause",
        "/ops/automations/fi-daily-brief/resume",
        "/ops/automations/not%20a%20slug!/pause",
    ]
    for who, headers, status, code in BAD_OPERATOR_CREDENTIALS:
        for path in gets:
            response = await small_bodies.http.get(path, headers=headers)
            assert response.status_code == status, f"{path} {who}: {response.text}"
            assert response.json()["code"] == code, f"{path} {who}"
        for path in [*posts, "/ops/automations/not%20a%20slug!/fire"]:
            for case, body, extra in [
                *BAD_BODIES,
                ("unknown fire field", b'{"surprise": 1, "params": []}', {}),
            ]:
                response = await small_bodies.http.post(
                    path,
                    content=body,
                    headers={"content-type": "application/json", **headers, **extra},
                )
                assert response.status_code == status, f"{path} {case} {who}: {response.text}"
                assert response.json()["code"] == code, f"{path} {case} {who}"
    # with the operator's credential the same requests are refused for what they say
    operator = operator_header("bearer", OPERATOR_TOKEN)
    for path in [*gets[:6], gets[-1]]:
        assert (await small_bodies.http.get(path, headers=operator)).status_code == 422, path
    assert await snapshot(db) == before


async def test_with_no_credentials_configured_a_bad_body_is_still_a_401(
    app_factory: Any, clean_auth_env: None
) -> None:
    client: AppClient = await app_factory(**NO_CREDENTIALS)
    for path in ["/ops-runs/claim", f"/ops-runs/{uuid.uuid4()}/fail", "/ops-runs/expire-leases"]:
        for case, body, extra in BAD_BODIES:
            response = await client.http.post(
                path, content=body, headers={"content-type": "application/json", **extra}
            )
            assert response.status_code == 401, f"{path} {case}: {response.text}"
            assert_refused(response, 401, "unauthenticated")


def test_every_api_route_declares_the_credential_it_takes() -> None:
    """The body guard and the routes find a route's credential in its declaration: a route
    of the API that declared none would word a malformed request before asking who sent
    it. The UI pages (a login redirect) and the health endpoints take none."""
    from fastapi.routing import APIRoute

    from ac_routers import APP_ROUTERS
    from ac_testkit import settings_env
    from activity_core.http.app import create_app
    from activity_core.http.credentials import Credential, CredentialTable, credential_of
    from activity_core.settings import load_settings

    app = create_app(load_settings(**settings_env()), dsn="postgresql://unused@127.0.0.1:1/x")
    routes = [r for router in APP_ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    worker = {
        ("POST", "/ops-runs/claim"),
        ("POST", "/ops-runs/{run_id}/heartbeat"),
        ("POST", "/ops-runs/{run_id}/complete"),
        ("POST", "/ops-runs/{run_id}/fail"),
        ("PUT", "/ops-runs/{run_id}/changes"),
    }
    declared = set()
    for route in routes:
        kind = credential_of(route)
        for method in route.methods or ():
            declared.add((method, route.path))
            if (method, route.path) in worker:
                assert kind is Credential.worker, route.path
            elif route.path.startswith(("/ops-runs", "/ops/")) and not route.path.startswith(
                "/ops/ui"
            ):
                # the operator plane: every read takes an operator or a viewer, every
                # action (a POST) an operator
                expected = Credential.operator if method == "POST" else Credential.viewer
                assert kind is expected, (method, route.path)
            else:
                assert route.path.startswith(("/ops/ui", "/healthz", "/readyz", "/metrics"))
                assert kind is None, (method, route.path)
    documented = {
        (method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item
    }
    assert worker <= documented <= declared

    # the app's table is those routes in the router's order, and finds each one's credential
    table: CredentialTable = app.state.credential_table
    assert [(p.pattern, set(m), k) for p, m, k in table.routes] == [
        (r.path_regex.pattern, r.methods, credential_of(r)) for r in routes
    ]
    run = uuid.uuid4()
    for method, path, kind in [
        ("POST", "/ops-runs/claim", Credential.worker),
        ("POST", f"/ops-runs/{run}/heartbeat", Credential.worker),
        ("POST", f"/ops-runs/{run}/complete", Credential.worker),
        ("POST", "/ops-runs/not-a-uuid/fail", Credential.worker),
        ("GET", "/ops-runs", Credential.viewer),
        ("GET", f"/ops-runs/{run}", Credential.viewer),
        ("GET", "/ops-runs/claim", Credential.viewer),  # get_run, as the router picks
        ("POST", "/ops-runs/expire-leases", Credential.operator),
        ("POST", "/ops-runs/requeue", Credential.operator),
        ("POST", f"/ops-runs/{run}/requeue", Credential.operator),
        ("POST", f"/ops-runs/{run}/cancel", Credential.operator),
        ("POST", f"/ops-runs/{run}/publish", Credential.operator),
        ("GET", f"/ops-runs/{run}/explain", Credential.viewer),
        ("GET", "/ops/runs/summary", Credential.viewer),
        ("GET", "/ops/runs/dead-letter", Credential.viewer),
        ("GET", "/ops/workers", Credential.viewer),
        ("GET", "/ops/audit", Credential.viewer),
        ("POST", "/ops/automations/fi-daily-brief/fire", Credential.operator),
        ("POST", "/ops/automations/fi-daily-brief/pause", Credential.operator),
        ("POST", "/ops/automations/fi-daily-brief/resume", Credential.operator),
        ("GET", "/ops/automations/fi-daily-brief", Credential.viewer),
        ("GET", "/ops/automations/fi-daily-brief/runs/r-1", Credential.viewer),
        ("GET", "/ops/ui/", None),
        ("POST", "/ops/ui/login", None),
        ("GET", "/healthz", None),
        ("POST", "/ops-runs", None),  # 405: no route takes it
        ("POST", "/nowhere", None),
    ]:
        assert table.credential(method, path) is kind, (method, path)
