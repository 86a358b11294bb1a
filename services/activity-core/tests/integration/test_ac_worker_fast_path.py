"""The worker fast path and the FastAPI routes answer alike.

Two app instances, one with the fast path and one without, each on its own database seeded
with identical rows, get the same sequence of worker requests (valid ones, refusals of every
kind, malformed ones the fast path hands on). Every answer must match byte for byte apart
from the two values that come from now() (lease_until, updated_at), and so must the rows
afterwards. A fast path that answered differently from the documented routes, or changed a
row differently, fails here.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi.routing import APIRoute

from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, AppClient, SeededQueue, running_app
from activity_core.db.pool import init_connection
from activity_core.http.routes_queue import router as queue_router
from activity_core.http.worker_fast_path import WorkerFastPath, match_worker_path
from activity_core.http.worker_ops import CLAIM, COMPLETE, FAIL, HEARTBEAT, WORKER_ENDPOINTS
from ops_contracts import CloseResponse

# Run ids fixed so both databases hold the same rows and both sequences name them.
RUNS = [uuid.UUID(f"00000000-0000-4000-8000-0000000000{i:02d}") for i in range(1, 7)]
UNKNOWN = uuid.UUID("00000000-0000-4000-8000-0000000000ff")
BASE = datetime(2026, 1, 1, tzinfo=UTC)
NOW_FIELDS = ("lease_until", "updated_at")
RESULT = {"status": "succeeded", "summary": "done", "tool_output": "never stored"}


async def seed(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    await init_connection(conn)
    try:
        seeded = SeededQueue(conn)
        for i, run_id in enumerate(RUNS):
            await seeded.run(
                id=run_id,
                idempotency_key=f"fast-path:{i}",
                created_at=BASE + timedelta(seconds=i),
                labels=["automated", "even" if i % 2 == 0 else "odd"],
            )
    finally:
        await conn.close()


def auth(kind: str) -> dict[str, str]:
    token = {"worker": WORKER_TOKEN, "operator": OPERATOR_TOKEN, "wrong": "x" * 32}.get(kind)
    return {"Authorization": f"Bearer {token}"} if token else {}


# The start of a worker body, for raw bodies that json.dumps cannot write.
W_RAW = b'{"worker_id": ' + json.dumps(WORKER_ID).encode()

# (path, body as bytes or JSON value, headers kind, extra headers, expected status or None)
Step = tuple[str, Any, str, dict[str, str], int | None]


def step(
    path: str, body: Any, who: str = "worker", expect: int | None = None, **headers: str
) -> Step:
    return (path, body, who, {k.replace("_", "-"): v for k, v in headers.items()}, expect)


def run_path(run_id: uuid.UUID, action: str) -> str:
    return f"/ops-runs/{run_id}/{action}"


SEQUENCE: list[Step] = [
    # refusals before anything is claimed
    step("/ops-runs/claim", {"worker_id": WORKER_ID}, who="none"),
    step("/ops-runs/claim", {"worker_id": WORKER_ID}, who="wrong"),
    step("/ops-runs/claim", {"worker_id": WORKER_ID}, who="operator"),
    step("/ops-runs/claim", {"worker_id": "someone-else"}),
    step(run_path(RUNS[0], "complete"), {"worker_id": WORKER_ID, "result": RESULT}),
    step(run_path(UNKNOWN, "heartbeat"), {"worker_id": WORKER_ID}),
    # claims: labels all / any, limits
    step("/ops-runs/claim", {"worker_id": WORKER_ID, "labels": ["odd"], "labels_mode": "all"}),
    step("/ops-runs/claim", {"worker_id": WORKER_ID, "limit": 2, "lease_seconds": 600}),
    step("/ops-runs/claim", {"worker_id": WORKER_ID, "labels": ["nothing"], "wait_seconds": 0}),
    # heartbeat, complete (applied, reconciled, conflicting), fail (reopened, terminal)
    step(run_path(RUNS[0], "heartbeat"), {"worker_id": WORKER_ID, "lease_seconds": 120}),
    step(run_path(RUNS[0], "heartbeat"), {"worker_id": "someone-else"}),
    step(run_path(RUNS[3], "heartbeat"), {"worker_id": WORKER_ID}),
    step(run_path(RUNS[0], "complete"), {"worker_id": WORKER_ID, "result": RESULT}),
    step(run_path(RUNS[0], "complete"), {"worker_id": WORKER_ID, "result": RESULT}),
    step(run_path(RUNS[0], "complete"), {"worker_id": WORKER_ID, "result": {"status": "x"}}),
    step(run_path(RUNS[0], "fail"), {"worker_id": WORKER_ID, "error": "late"}),
    step(run_path(RUNS[1], "fail"), {"worker_id": WORKER_ID, "error": "flaky", "reopen": True}),
    step(run_path(RUNS[2], "fail"), {"worker_id": WORKER_ID, "error": "broken", "result": RESULT}),
    step(run_path(RUNS[2], "fail"), {"worker_id": WORKER_ID, "error": "broken", "result": RESULT}),
    step("/ops-runs/claim", {"worker_id": WORKER_ID, "limit": 10}),
    step(run_path(RUNS[1], "complete"), {"worker_id": WORKER_ID, "result": {"nested": {"a": [1]}}}),
    # malformed: the fast path hands these on, the route words the 4xx
    step("/ops-runs/claim", b'{"worker_id": "w", "limit": NaN}'),
    step("/ops-runs/claim", {"worker_id": WORKER_ID, "limit": "1"}),
    step("/ops-runs/claim", {"worker_id": WORKER_ID, "surprise": 1}),
    step("/ops-runs/claim", b""),
    step("/ops-runs/claim", b"[" * 100 + b"]" * 100),
    step(run_path(RUNS[4], "complete"), {"worker_id": WORKER_ID}),
    step(f"/ops-runs/{str(RUNS[4]).upper()}/complete", {"worker_id": WORKER_ID, "result": {}}),
    step(f"/ops-runs/{RUNS[4].hex}/heartbeat", {"worker_id": WORKER_ID}),
    step("/ops-runs/not-a-uuid/fail", {"worker_id": WORKER_ID, "error": "e"}),
    step("/ops-runs/claim", json.dumps({"worker_id": WORKER_ID}), content_type="text/plain"),
    step(
        "/ops-runs/claim",
        json.dumps({"worker_id": WORKER_ID}),
        content_type="application/vnd.ops+json",
    ),
    # strict bodies: what Python's json would take but JSON or the API does not, and the
    # media types that name JSON but are not the API's one (body_guard.py)
    step("/ops-runs/claim", W_RAW + b', "worker_id": "someone-else"}', expect=422),
    step("/ops-runs/claim", W_RAW + b', "labels": ["a"], "limit": 1, "limit": 2}', expect=422),
    step(
        run_path(RUNS[4], "complete"),
        W_RAW + b', "result": {"ok": true, "evidence": {"x": [{"a": 1, "a": 1}]}}}',
        expect=422,
    ),
    step(run_path(RUNS[4], "fail"), W_RAW + b', "error": "e\\udfff"}', expect=422),
    step(run_path(RUNS[4], "complete"), W_RAW + b', "result": {"n": 1e400}}', expect=422),
    step(run_path(RUNS[4], "heartbeat"), b"\xef\xbb\xbf" + W_RAW + b"}", expect=422),
    step(run_path(RUNS[4], "heartbeat"), W_RAW + b"} {}", expect=422),
    step(
        run_path(RUNS[4], "heartbeat"),
        json.dumps({"worker_id": WORKER_ID}).encode("utf-16"),
        expect=422,
    ),
    *[
        step(
            run_path(RUNS[4], "heartbeat"),
            {"worker_id": WORKER_ID},
            content_type=media_type,
            expect=415,
        )
        for media_type in (
            "application/merge-patch+json",
            "text/json",
            "application/json; charset=latin-1",
            "application/json; version=2",
        )
    ],
    step(
        run_path(RUNS[5], "heartbeat"),
        {"worker_id": WORKER_ID, "attempt": 1},
        content_type='Application/JSON; charset="UTF-8"',
        expect=200,
    ),
    step(
        run_path(RUNS[5], "fail"),
        {"worker_id": WORKER_ID, "error": "e", "result": {"pad": "x" * 1_100_000}},
    ),
    # fencing: RUNS[3..5] are claimed at attempt 1 (the claim of 10 above); another
    # attempt is expired_lease on every path (the one-statement close, the locking path
    # of a reopening failure, the heartbeat) and changes nothing
    step(run_path(RUNS[3], "heartbeat"), {"worker_id": WORKER_ID, "attempt": 2}, expect=409),
    step(run_path(RUNS[3], "heartbeat"), {"worker_id": WORKER_ID, "attempt": 1}, expect=200),
    step(
        run_path(RUNS[3], "complete"),
        {"worker_id": WORKER_ID, "result": RESULT, "attempt": 2},
        expect=409,
    ),
    step(
        run_path(RUNS[3], "fail"),
        {"worker_id": WORKER_ID, "error": "e", "reopen": True, "attempt": 7},
        expect=409,
    ),
    step(
        run_path(RUNS[3], "complete"),
        {"worker_id": WORKER_ID, "result": RESULT, "attempt": 1},
        expect=200,
    ),
    # terminal: the exact repeat reconciles whatever attempt it names
    step(
        run_path(RUNS[3], "complete"),
        {"worker_id": WORKER_ID, "result": RESULT, "attempt": 2},
        expect=200,
    ),
    step(run_path(RUNS[4], "fail"), {"worker_id": WORKER_ID, "error": "e", "attempt": 0}),
    step(run_path(RUNS[4], "fail"), {"worker_id": WORKER_ID, "error": "e", "attempt": "1"}),
    step(run_path(RUNS[4], "heartbeat"), {"worker_id": WORKER_ID, "attempt": True}),
    # credentials before the body: malformed requests from callers without a worker
    # credential are 401/403, whichever door they reach first
    step("/ops-runs/claim", b'{"worker_id": "w", "limit": NaN}', who="none", expect=401),
    step("/ops-runs/claim", {"worker_id": WORKER_ID, "limit": "1"}, who="wrong", expect=401),
    step(run_path(RUNS[5], "complete"), {"worker_id": 1}, who="operator", expect=403),
    step("/ops-runs/not-a-uuid/fail", {"worker_id": WORKER_ID}, who="none", expect=401),
    step(
        run_path(RUNS[5], "fail"),
        {"worker_id": WORKER_ID, "error": "e", "result": {"pad": "x" * 1_100_000}},
        who="none",
        expect=401,
    ),
    step("/ops-runs/claim", b"", who="none", content_type="text/plain", expect=401),
    step("/ops-runs/claim", W_RAW + b', "limit": 1, "limit": 1}', who="none", expect=401),
    step(
        "/ops-runs/claim",
        {"worker_id": WORKER_ID},
        who="operator",
        content_type="application/merge-patch+json",
        expect=403,
    ),
    step(
        run_path(RUNS[5], "fail"),
        {"worker_id": WORKER_ID, "error": "e", "attempt": 1},
        expect=200,
    ),
]


async def send(client: httpx.AsyncClient, s: Step) -> httpx.Response:
    path, body, who, extra, _ = s
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    headers = {"content-type": "application/json", **auth(who), **extra}
    return await client.post(path, content=content, headers=headers)


def masked(value: Any) -> Any:
    """The value with the now()-dependent fields replaced by whether they were set."""
    if isinstance(value, dict):
        return {
            k: (v is not None) if k in NOW_FIELDS else masked(v) for k, v in sorted(value.items())
        }
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


_NOW_VALUE = re.compile(rb'"(?:' + "|".join(NOW_FIELDS).encode() + rb')":"[^"]*"')


def _digits_masked(match: re.Match[bytes]) -> bytes:
    return re.sub(rb"[0-9]", b"0", match.group(0))


def comparable(response: httpx.Response) -> tuple[Any, ...]:
    """Status, headers and the exact body bytes (key order included), the digits of the
    values of now() masked: their format must match too."""
    body = _NOW_VALUE.sub(_digits_masked, response.content)
    headers = {k: v for k, v in response.headers.items() if k != "content-length"}
    return response.status_code, headers, body


async def rows(dsn: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(dsn)
    await init_connection(conn)
    try:
        found = await conn.fetch("SELECT * FROM ops_runs ORDER BY id")
    finally:
        await conn.close()
    return [masked(dict(r)) for r in found]


async def test_both_doors_answer_and_write_alike(db_dsn: str, twin_db_dsn: str) -> None:
    await seed(db_dsn)
    await seed(twin_db_dsn)
    async with (
        running_app(db_dsn, worker_fast_path=True) as fast,
        running_app(twin_db_dsn, worker_fast_path=False) as routed,
    ):
        statuses = set()
        for s in SEQUENCE:
            a, b = await send(fast.http, s), await send(routed.http, s)
            assert comparable(a) == comparable(b), f"{s[0]} {s[1]!r:.80}"
            expected = s[4]
            assert expected is None or a.status_code == expected, f"{s[0]} {s[1]!r:.80}"
            statuses.add(a.status_code)
        # The sequence reached every kind of answer, so the comparison covered them all.
        assert statuses == {200, 401, 403, 404, 409, 413, 415, 422}
        assert await rows(db_dsn) == await rows(twin_db_dsn)


async def test_an_unmigrated_database_is_the_same_503_through_both_doors(
    empty_dsn: str,
) -> None:
    answers = []
    for fast_path in (True, False):
        async with running_app(empty_dsn, worker_fast_path=fast_path) as client:
            claim = step("/ops-runs/claim", {"worker_id": WORKER_ID})
            answers.append(await send(client.http, claim))
    assert answers[0].status_code == 503
    assert answers[0].json()["code"] == "schema_not_current"
    assert answers[0].headers["retry-after"] == "5"
    assert comparable(answers[0]) == comparable(answers[1])


# -- what the fast path takes and what it hands on ------------------------------------------


class Inner:
    """Stands for the FastAPI app behind the fast path: records what was handed on."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
async def behind(
    api: AppClient, seeded: SeededQueue
) -> AsyncIterator[tuple[httpx.AsyncClient, Inner]]:
    """A client whose requests meet the fast path in front of a recording inner app; the
    scope carries the started app, for its queue and exception handlers."""
    await seeded.runs(3)
    inner = Inner()
    fast = WorkerFastPath(inner, max_bytes=api.app.state.settings.max_body_bytes)

    async def with_app(scope: Any, receive: Any, send: Any) -> None:
        await fast({**scope, "app": api.app}, receive, send)

    transport = httpx.ASGITransport(app=with_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client, inner


async def test_valid_worker_requests_never_reach_the_routes(
    behind: tuple[httpx.AsyncClient, Inner], api: AppClient
) -> None:
    client, inner = behind
    claimed = await send(client, step("/ops-runs/claim", {"worker_id": WORKER_ID, "limit": 2}))
    assert claimed.status_code == 200
    first, second = (r["id"] for r in claimed.json()["runs"])
    beat = await send(
        client, step(run_path(uuid.UUID(first), "heartbeat"), {"worker_id": WORKER_ID})
    )
    done = await send(
        client,
        step(run_path(uuid.UUID(first), "complete"), {"worker_id": WORKER_ID, "result": RESULT}),
    )
    failed = await send(
        client, step(run_path(uuid.UUID(second), "fail"), {"worker_id": WORKER_ID, "error": "e"})
    )
    refused = await send(
        client, step(run_path(UNKNOWN, "fail"), {"worker_id": WORKER_ID, "error": "e"})
    )
    assert [beat.status_code, done.status_code, failed.status_code] == [200, 200, 200]
    assert CloseResponse.model_validate(done.json()).close_disposition == "applied"
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    assert inner.bodies == []


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/ops-runs/claim", b'{"worker_id": "w", "limit": Infinity}', {}),
        ("/ops-runs/claim", b'{"worker_id": "' + WORKER_ID.encode() + b'", "limit": 0}', {}),
        (
            "/ops-runs/claim",
            b'{"worker_id": "' + WORKER_ID.encode() + b'"}',
            {"content-type": "text/plain"},
        ),
        (f"/ops-runs/{str(UNKNOWN).upper()}/fail", b'{"worker_id": "w", "error": "e"}', {}),
        (f"/ops-runs/{UNKNOWN}/retry", b"{}", {}),
        ("/ops-runs", b"{}", {}),
        ("/healthz", b"{}", {}),
    ],
)
async def test_anything_not_plainly_valid_is_handed_on_with_its_bytes(
    behind: tuple[httpx.AsyncClient, Inner], path: str, body: bytes, headers: dict[str, str]
) -> None:
    client, inner = behind
    response = await client.post(
        path,
        content=body,
        headers={"content-type": "application/json", **auth("worker"), **headers},
    )
    assert response.status_code == 299
    assert inner.bodies == [body]


async def test_a_body_over_the_limit_is_handed_on_whole(api: AppClient) -> None:
    inner = Inner()
    fast = WorkerFastPath(inner, max_bytes=1024)
    body = json.dumps({"worker_id": WORKER_ID, "error": "e" * 2000}).encode()
    chunks = [body[:600], body[600:1200], body[1200:]]

    async def streamed() -> Any:
        for chunk in chunks:
            yield chunk

    async def with_app(scope: Any, receive: Any, send: Any) -> None:
        await fast({**scope, "app": api.app}, receive, send)

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=with_app), base_url="http://t"
    ) as c:
        # declared too long: handed on unread; streamed without a length: handed on unread
        declared = await c.post(
            run_path(UNKNOWN, "fail"), content=body, headers={"content-type": "application/json"}
        )
        streamed_response = await c.post(
            run_path(UNKNOWN, "fail"),
            content=streamed(),
            headers={"content-type": "application/json"},
        )
    assert declared.status_code == streamed_response.status_code == 299
    assert inner.bodies == [body, body]

    # A body that outgrows its declared length (a server would refuse it; the fast path
    # still must not answer it): what was read is replayed, the rest follows unread.
    messages = [
        {"type": "http.request", "body": c, "more_body": c is not chunks[-1]} for c in chunks
    ]
    sent: list[Any] = []

    async def receive() -> Any:
        return messages.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": run_path(UNKNOWN, "fail"),
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"600")],
        "app": api.app,
    }
    await fast(scope, receive, send)
    assert sent[0]["status"] == 299
    assert inner.bodies[-1] == body


def test_paths_the_fast_path_takes() -> None:
    run = uuid.UUID("6f1c0d3e-2b4a-4c5d-8e9f-0a1b2c3d4e5f")
    assert match_worker_path("/ops-runs/claim") == (CLAIM, None)
    assert match_worker_path(f"/ops-runs/{run}/heartbeat") == (HEARTBEAT, run)
    assert match_worker_path(f"/ops-runs/{run}/complete") == (COMPLETE, run)
    assert match_worker_path(f"/ops-runs/{run}/fail") == (FAIL, run)
    for other in [
        "/ops-runs/claim/",
        "/ops-runs",
        "/ops-runs/expire-leases",
        f"/ops-runs/{run}",
        f"/ops-runs/{run}/complete/",
        f"/ops-runs/{run}/expire",
        f"/ops-runs/{str(run).upper()}/fail",
        f"/ops-runs/{run.hex}/fail",
        f"/ops-runs/{{{run}}}/fail",
        f"/ops-runs/{run}x/fail",
        "/ops/automations/x/fire",
    ]:
        assert match_worker_path(other) is None, other


def test_the_routes_declare_what_the_fast_path_serves() -> None:
    """Both doors serve the same paths, take the same body model and answer the same
    response model."""
    routes = {r.name: r for r in queue_router.routes if isinstance(r, APIRoute)}
    for endpoint in WORKER_ENDPOINTS:
        route = routes[endpoint.action]
        path = "/ops-runs/claim" if endpoint is CLAIM else f"/ops-runs/{{run_id}}/{endpoint.action}"
        assert route.path == path
        assert route.methods == {"POST"}
        assert route.response_model is endpoint.response_model
        assert route.body_field is not None
        assert route.body_field.field_info.annotation is endpoint.body_model
