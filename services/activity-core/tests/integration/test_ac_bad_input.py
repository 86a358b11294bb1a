"""Bad input at the HTTP edge: always a 4xx with the documented body, and no row changes.

Every request here carries valid credentials, so what refuses it is the input alone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, AppClient, SeededQueue

WORKER_HEADERS = {"Authorization": f"Bearer {WORKER_TOKEN}"}
OPERATOR_HEADERS = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
JSON = {"content-type": "application/json"}

VALID_BODIES: dict[str, dict[str, Any]] = {
    "claim": {"worker_id": WORKER_ID},
    "heartbeat": {"worker_id": WORKER_ID},
    "complete": {"worker_id": WORKER_ID, "result": {"ok": True}},
    "fail": {"worker_id": WORKER_ID, "error": "llm timeout"},
}


class Target:
    """A claimed run (ours, live lease) next to an open one, and a way to see if any changed."""

    def __init__(self, api: AppClient, db: asyncpg.Connection, claimed: uuid.UUID) -> None:
        self.api = api
        self.db = db
        self.claimed = claimed

    def path(self, endpoint: str) -> str:
        return "/ops-runs/claim" if endpoint == "claim" else f"/ops-runs/{self.claimed}/{endpoint}"

    async def snapshot(self) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.db.fetch("SELECT * FROM ops_runs ORDER BY id")]

    async def post_json(self, endpoint: str, body: Any) -> httpx.Response:
        return await self.post_raw(endpoint, json.dumps(body).encode())

    async def post_raw(
        self, endpoint: str, raw: bytes, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return await self.api.http.post(
            self.path(endpoint), content=raw, headers={**WORKER_HEADERS, **JSON, **(headers or {})}
        )


@pytest.fixture
async def target(api: AppClient, seeded: SeededQueue, db: asyncpg.Connection) -> Target:
    await seeded.run()
    claimed = await seeded.claimed(timedelta(hours=1))
    return Target(api, db, claimed)


def assert_invalid(
    response: httpx.Response,
    case: str,
    *,
    field: str | None = None,
    status: int = 422,
    code: str = "invalid_request",
) -> None:
    assert response.status_code == status, f"{case}: {response.status_code} {response.text}"
    body = response.json()
    assert body["code"] == code, f"{case}: {body}"
    assert isinstance(body["detail"], str), case
    assert body["detail"], case
    if code == "invalid_request":
        # every invalid_request names what was bad (the spec's HTTP section)
        errors = body.get("errors")
        assert isinstance(errors, list) and errors, f"{case}: {body}"
        for err in errors:
            assert set(err) == {"loc", "msg", "type"}, f"{case}: {err}"
            assert isinstance(err["loc"], list), f"{case}: {err}"
        if field is not None:
            assert any(field in err["loc"] for err in errors), f"{case}: {field} not in {errors}"


def with_(endpoint: str, **fields: Any) -> dict[str, Any]:
    return {**VALID_BODIES[endpoint], **fields}


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


# -- JSON that is not JSON, or not an object ---------------------------------------------------

MALFORMED: list[tuple[str, bytes, dict[str, str]]] = [
    ("truncated", b'{"worker_id": ', {}),
    ("single quotes", b"{'worker_id': 'x'}", {}),
    ("trailing garbage", json.dumps({"worker_id": WORKER_ID}).encode() + b" }", {}),
    ("not utf-8", b'{"worker_id": "\xff\xfe"}', {}),
    ("empty", b"", {}),
    ("null", b"null", {}),
    ("array", b"[]", {}),
    ("string", b'"claim"', {}),
    ("number", b"1", {}),
    ("form encoded", b"worker_id=x", {"content-type": "application/x-www-form-urlencoded"}),
    ("text/plain", json.dumps({"worker_id": WORKER_ID}).encode(), {"content-type": "text/plain"}),
]


@pytest.mark.parametrize("endpoint", VALID_BODIES)
async def test_malformed_json_is_a_422(target: Target, endpoint: str) -> None:
    before = await target.snapshot()
    for case, raw, headers in MALFORMED:
        assert_invalid(await target.post_raw(endpoint, raw, headers), case)
    assert await target.snapshot() == before


# -- wrong types, missing fields, out-of-range bounds, unknown fields -------------------------

WRONG_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("claim", {"limit": "1"}, "limit"),
    ("claim", {"limit": True}, "limit"),
    ("claim", {"limit": 1.0}, "limit"),
    ("claim", {"limit": None}, "limit"),
    ("claim", {"lease_seconds": "60"}, "lease_seconds"),
    ("claim", {"wait_seconds": False}, "wait_seconds"),
    ("claim", {"labels": "automated"}, "labels"),
    ("claim", {"labels": [1]}, "labels"),
    ("claim", {"labels_mode": "some"}, "labels_mode"),
    ("claim", {"worker_id": 7}, "worker_id"),
    ("heartbeat", {"lease_seconds": "60"}, "lease_seconds"),
    ("heartbeat", {"worker_id": ["a"]}, "worker_id"),
    ("complete", {"result": "done"}, "result"),
    ("complete", {"result": [{"ok": True}]}, "result"),
    ("complete", {"result": None}, "result"),
    ("complete", {"result": 1}, "result"),
    ("fail", {"reopen": "yes"}, "reopen"),
    ("fail", {"reopen": 1}, "reopen"),
    ("fail", {"error": 42}, "error"),
    ("fail", {"error": None}, "error"),
    ("fail", {"result": "partial"}, "result"),
    ("fail", {"result": []}, "result"),
]

OUT_OF_RANGE: list[tuple[str, dict[str, Any], str]] = [
    ("claim", {"limit": 0}, "limit"),
    ("claim", {"limit": 101}, "limit"),
    ("claim", {"limit": -1}, "limit"),
    ("claim", {"lease_seconds": 0}, "lease_seconds"),
    ("claim", {"lease_seconds": 86401}, "lease_seconds"),
    ("claim", {"wait_seconds": -1}, "wait_seconds"),
    ("claim", {"wait_seconds": 21}, "wait_seconds"),
    ("claim", {"limit": 10**30}, "limit"),
    ("claim", {"labels": []}, "labels"),
    ("claim", {"labels": [f"l{i}" for i in range(21)]}, "labels"),
    ("claim", {"labels": ["has space"]}, "labels"),
    ("claim", {"worker_id": ""}, "worker_id"),
    ("claim", {"worker_id": "w" * 201}, "worker_id"),
    ("claim", {"worker_id": "rein aharness"}, "worker_id"),
    ("heartbeat", {"lease_seconds": 0}, "lease_seconds"),
    ("heartbeat", {"lease_seconds": 86401}, "lease_seconds"),
    ("fail", {"error": ""}, "error"),
    ("fail", {"error": "e" * 4097}, "error"),
    ("fail", {"error": "e" * 500_000}, "error"),
]

UNKNOWN_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    (endpoint, {"unexpected": 1}, "unexpected") for endpoint in VALID_BODIES
] + [
    ("claim", {"priority": "high"}, "priority"),
    ("complete", {"error": "also failed"}, "error"),
    ("complete", {"reopen": True}, "reopen"),
    ("heartbeat", {"result": {"ok": True}}, "result"),
]


@pytest.mark.parametrize(
    "table",
    [WRONG_TYPES, OUT_OF_RANGE, UNKNOWN_FIELDS],
    ids=["wrong-types", "out-of-range", "unknown-top-level-fields"],
)
async def test_invalid_fields_are_a_422_naming_the_field(
    target: Target, table: list[tuple[str, dict[str, Any], str]]
) -> None:
    before = await target.snapshot()
    for endpoint, fields, field in table:
        response = await target.post_json(endpoint, with_(endpoint, **fields))
        assert_invalid(response, f"{endpoint} {fields!r:.80}", field=field)
    assert await target.snapshot() == before


async def test_missing_required_fields_are_a_422_naming_the_field(target: Target) -> None:
    before = await target.snapshot()
    for endpoint, body in VALID_BODIES.items():
        for field in body:
            partial = {k: v for k, v in body.items() if k != field}
            response = await target.post_json(endpoint, partial)
            assert_invalid(response, f"{endpoint} without {field}", field=field)
    assert await target.snapshot() == before


async def test_the_bounds_themselves_are_accepted(target: Target, seeded: SeededQueue) -> None:
    # the other side of the out-of-range cases: 1..100, 1..86400 and 0..20 are inclusive
    response = await target.post_json(
        "claim", with_("claim", limit=100, lease_seconds=86400, wait_seconds=0)
    )
    assert response.status_code == 200, response.text
    beat = await target.post_json("heartbeat", with_("heartbeat", lease_seconds=1))
    assert beat.status_code == 200, beat.text
    beat = await target.post_json("heartbeat", with_("heartbeat", lease_seconds=86400))
    assert beat.status_code == 200, beat.text
    done = await target.post_json("fail", with_("fail", error="e" * 4096))
    assert done.status_code == 200, done.text
    assert (await seeded.row(target.claimed))["state"] == "failed"


async def test_expire_leases_takes_an_empty_body_only(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    stale = await seeded.claimed(timedelta(minutes=-1))
    target = Target(api, db, stale)
    before = await target.snapshot()
    for case, raw, field in [
        ("unknown field", b'{"unexpected": 1}', "unexpected"),
        ("malformed", b'{"', None),
        ("array", b"[]", None),
        ("NaN", b'{"x": NaN}', None),
    ]:
        response = await api.http.post(
            "/ops-runs/expire-leases", content=raw, headers={**OPERATOR_HEADERS, **JSON}
        )
        assert_invalid(response, case, field=field)
    assert await target.snapshot() == before
    for raw in (b"", b"{}"):
        response = await api.http.post(
            "/ops-runs/expire-leases", content=raw, headers={**OPERATOR_HEADERS, **JSON}
        )
        assert response.status_code == 200, response.text
    assert (await seeded.row(stale))["state"] == "open"


# -- non-finite numbers and deep nesting --------------------------------------------------------

W = json.dumps(WORKER_ID)
NON_FINITE: list[tuple[str, str, str]] = [
    *[
        ("claim", f"top-level {name}", f'{{"worker_id": {W}, "{field}": {token}}}')
        for name, token in (("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"))
        for field in ("limit", "lease_seconds", "wait_seconds")
    ],
    *[
        ("heartbeat", f"lease_seconds {token}", f'{{"worker_id": {W}, "lease_seconds": {token}}}')
        for token in ("NaN", "Infinity", "-Infinity")
    ],
    *[
        (
            "complete",
            f"{token} deep inside result",
            f'{{"worker_id": {W}, "result": {{"ok": true, "evidence": '
            f'{{"duration_s": 1, "extra": [1, {{"deeper": [{token}]}}]}}}}}}',
        )
        for token in ("NaN", "Infinity", "-Infinity")
    ],
    *[
        (
            "complete",
            f"result measurement {token}",
            f'{{"worker_id": {W}, "result": '
            f'{{"ok": true, "evidence": {{"duration_s": {token}}}}}}}',
        )
        for token in ("NaN", "Infinity", "-Infinity")
    ],
    *[
        (
            "fail",
            f"{token} inside a failure result",
            f'{{"worker_id": {W}, "error": "x", "result": {{"unknown": {{"a": {token}}}}}}}',
        )
        for token in ("NaN", "Infinity", "-Infinity")
    ],
    # a literal too large for a float parses as infinity in Python: still not finite JSON
    ("complete", "1e400 inside result", f'{{"worker_id": {W}, "result": {{"n": [1e400]}}}}'),
    ("complete", "-1e400 inside result", f'{{"worker_id": {W}, "result": {{"n": -1e400}}}}'),
    ("claim", "1e400 as limit", f'{{"worker_id": {W}, "limit": 1e400}}'),
    (
        "fail",
        "1e400 in a failure result",
        f'{{"worker_id": {W}, "error": "x", "result": {{"duration_s": 1e400}}}}',
    ),
]


async def test_non_finite_numbers_anywhere_are_a_422(target: Target) -> None:
    before = await target.snapshot()
    for endpoint, case, raw in NON_FINITE:
        assert_invalid(await target.post_raw(endpoint, raw.encode()), f"{endpoint}: {case}")
    assert await target.snapshot() == before


@pytest.mark.parametrize("depth", [65, 1_000, 100_000])
async def test_a_deeply_nested_result_is_a_422_not_a_500(target: Target, depth: int) -> None:
    before = await target.snapshot()
    for endpoint, raw in [
        ("complete", f'{{"worker_id": {W}, "result": {{"ok": true, "x": {nested(depth)}}}}}'),
        ("fail", f'{{"worker_id": {W}, "error": "x", "result": {{"x": {nested(depth)}}}}}'),
        ("claim", f'{{"worker_id": {W}, "labels": {nested(depth, chr(34) + "a" + chr(34))}}}'),
    ]:
        assert_invalid(await target.post_raw(endpoint, raw.encode()), f"{endpoint} at {depth}")
    assert await target.snapshot() == before


async def test_moderate_nesting_inside_result_is_accepted_and_dropped(
    target: Target, seeded: SeededQueue
) -> None:
    raw = f'{{"worker_id": {W}, "result": {{"ok": true, "blob": {nested(40)}}}}}'
    response = await target.post_raw("complete", raw.encode())
    assert response.status_code == 200, response.text
    assert "blob" not in (await seeded.row(target.claimed))["result"]


# -- size ------------------------------------------------------------------------------------


@pytest.fixture
async def small_bodies(app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection) -> Target:
    client: AppClient = await app_factory(ACTIVITY_CORE_MAX_BODY_BYTES=4096)
    claimed = await seeded.claimed(timedelta(hours=1))
    return Target(client, db, claimed)


async def test_a_body_over_the_limit_is_a_413(small_bodies: Target) -> None:
    target = small_bodies
    before = await target.snapshot()
    big = with_("complete", result={"ok": True, "path": "p" * 5000})
    response = await target.post_json("complete", big)
    assert_invalid(response, "oversized complete", status=413, code="request_too_large")
    huge_error = with_("fail", error="e" * 4000, result={"notes": "n" * 4000})
    response = await target.post_json("fail", huge_error)
    assert_invalid(response, "oversized fail", status=413, code="request_too_large")

    async def chunks() -> AsyncIterator[bytes]:
        # no Content-Length: the limit holds for a streamed body too
        yield b'{"worker_id": ' + json.dumps(WORKER_ID).encode() + b', "result": {"pad": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}}'

    response = await target.api.http.post(
        target.path("complete"), content=chunks(), headers={**WORKER_HEADERS, **JSON}
    )
    assert_invalid(response, "streamed", status=413, code="request_too_large")
    assert await target.snapshot() == before

    # just under the limit is a normal request
    response = await target.post_json("complete", with_("complete", result={"pad": "p" * 3000}))
    assert response.status_code == 200, response.text


async def test_the_default_limit_is_a_413_too(target: Target) -> None:
    before = await target.snapshot()
    body = with_("complete", result={"ok": True, "pad": "p" * 1_100_000})
    response = await target.post_json("complete", body)
    assert_invalid(response, "over 1 MiB", status=413, code="request_too_large")
    assert await target.snapshot() == before


# -- the path and the query ------------------------------------------------------------------

BAD_RUN_IDS = ["not-a-uuid", "1234", str(uuid.uuid4()) + "0", "00000000-0000-0000-0000", "%00"]


async def test_a_run_id_that_is_not_a_uuid_is_a_422_naming_it(target: Target) -> None:
    before = await target.snapshot()
    for bad in BAD_RUN_IDS:
        for endpoint in ("heartbeat", "complete", "fail"):
            response = await target.api.http.post(
                f"/ops-runs/{bad}/{endpoint}",
                json=VALID_BODIES[endpoint],
                headers=WORKER_HEADERS,
            )
            assert_invalid(response, f"{endpoint} {bad}", field="run_id")
        response = await target.api.http.get(f"/ops-runs/{bad}", headers=OPERATOR_HEADERS)
        assert_invalid(response, f"get {bad}", field="run_id")
    assert await target.snapshot() == before


BAD_LIST_QUERIES: list[tuple[str, str | None]] = [
    ("limit=0", "limit"),
    ("limit=201", "limit"),
    ("limit=abc", "limit"),
    ("state=bogus", "state"),
    ("activity_definition_id=not-a-uuid", "activity_definition_id"),
    ("label=has%20space", "label"),
    ("label=%00", "label"),
    ("label=" + "l" * 101, "label"),
    ("&".join(f"label=l{i}" for i in range(21)), "label"),
    ("target_repo=", "target_repo"),
    ("target_repo=research%00briefs", "target_repo"),
    ("target_repo=line%0Abreak", "target_repo"),
    ("target_repo=" + "r" * 257, "target_repo"),
    ("cursor=", "cursor"),
    ("cursor=not-a-cursor", None),
    ("cursor=%00%01", None),
]


async def test_bad_list_filters_are_a_422(target: Target) -> None:
    for query, field in BAD_LIST_QUERIES:
        response = await target.api.http.get(f"/ops-runs?{query}", headers=OPERATOR_HEADERS)
        assert_invalid(response, query[:60], field=field)


# -- what a valid close stores -------------------------------------------------------------------


async def test_unknown_fields_inside_result_are_accepted_and_never_stored(
    target: Target, seeded: SeededQueue
) -> None:
    result = {
        "ok": True,
        "path": "briefs/2026-12-03.md",
        "surprise": {"nested": "surprise-value-7f3a"},
        "tool_output": "raw-tool-output-91c2",
        "prompt": "the-whole-prompt-55d1",
        "evidence": {
            "request_id": "req-1",
            "contract_version": "1.0",
            "outcome": "succeeded",
            "tokens_spent": 0,
            "mystery_measurement": "mystery-value-3be8",
        },
    }
    response = await target.post_json("complete", with_("complete", result=result))
    assert response.status_code == 200, response.text
    row = await seeded.row(target.claimed)
    stored = json.dumps(row["result"])
    for dropped in (
        "surprise",
        "surprise-value-7f3a",
        "tool_output",
        "raw-tool-output-91c2",
        "the-whole-prompt-55d1",
        "mystery_measurement",
        "mystery-value-3be8",
    ):
        assert dropped not in stored, dropped
        assert dropped not in response.text, dropped
    assert row["result"]["path"] == "briefs/2026-12-03.md"
    assert row["result"]["execution_evidence"]["tokens_spent"] == 0
    assert response.json()["result"] == row["result"]


async def test_unknown_fields_inside_a_failure_result_are_dropped_too(
    target: Target, seeded: SeededQueue
) -> None:
    body = with_("fail", result={"ok": False, "stack": "secret-stack-trace-a1b2"})
    response = await target.post_json("fail", body)
    assert response.status_code == 200, response.text
    row = await seeded.row(target.claimed)
    assert "secret-stack-trace-a1b2" not in json.dumps(row["result"])
    assert row["state"] == "failed"
