"""Strict request bodies on every JSON endpoint, through both doors (the worker fast path
and the FastAPI routes): what Python's json module would take but JSON or the API does
not is 422 `invalid_request` naming the body, a media type that names JSON but is not
application/json (charset=utf-8 at most) is 415 `unsupported_media_type`, and neither
changes a row (http/body_guard.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, AppClient, SeededQueue, running_app
from activity_core.http.body_guard import (
    MAX_JSON_DEPTH,
    BodyRejected,
    accepts_json,
    check_tree,
    names_json,
    parse_strict_json,
)
from ops_contracts import ErrorBody, RefusalCode

CREDENTIALS = {
    "worker": {"Authorization": f"Bearer {WORKER_TOKEN}"},
    "operator": {"Authorization": f"Bearer {OPERATOR_TOKEN}"},
}
JSON_TYPE = "application/json"
PLACEHOLDER = '"__here__"'


@dataclass(frozen=True)
class Endpoint:
    name: str
    path: str
    who: str
    body: dict[str, Any]
    # a field that takes any JSON object: a bad value hidden in it is not a bad field
    free: str | None = None

    def raw(self, inner: str | None = None) -> bytes:
        """The valid body; with `inner`, that JSON text placed three levels deep (inside
        the free-form field, else inside a field of its own)."""
        if inner is None:
            return json.dumps(self.body).encode()
        deep = {"deep": [{"here": "__here__"}]}
        body = (
            {**self.body, self.free: {**self.body[self.free], **deep}}
            if self.free
            else {**self.body, "extra": deep}
        )
        return json.dumps(body).replace(PLACEHOLDER, inner).encode()


@dataclass(frozen=True)
class Rows:
    claimed: uuid.UUID
    open: uuid.UUID
    failed: uuid.UUID


def endpoints(rows: Rows) -> list[Endpoint]:
    me = {"worker_id": WORKER_ID}
    run = f"/ops-runs/{rows.claimed}"
    automation = "/ops/automations/test-activity"
    return [
        Endpoint("claim", "/ops-runs/claim", "worker", {**me, "limit": 1}),
        Endpoint("heartbeat", f"{run}/heartbeat", "worker", {**me, "lease_seconds": 60}),
        Endpoint("complete", f"{run}/complete", "worker", {**me, "result": {"ok": True}}, "result"),
        Endpoint(
            "fail", f"{run}/fail", "worker", {**me, "error": "e", "result": {"ok": False}}, "result"
        ),
        Endpoint("expire-leases", "/ops-runs/expire-leases", "operator", {}),
        Endpoint("requeue", "/ops-runs/requeue", "operator", {"run_ids": [str(rows.failed)]}),
        Endpoint("requeue-one", f"/ops-runs/{rows.failed}/requeue", "operator", {}),
        Endpoint("cancel", f"/ops-runs/{rows.open}/cancel", "operator", {"reason": "stop"}),
        Endpoint("pause", f"{automation}/pause", "operator", {"reason": "maintenance"}),
        Endpoint("resume", f"{automation}/resume", "operator", {}),
        Endpoint("fire", f"{automation}/fire", "operator", {"params": {"day": 1}}, "params"),
    ]


def duplicated(endpoint: Endpoint) -> bytes:
    """The valid body with its first key twice, the same value both times."""
    if not endpoint.body:
        return b'{"x": 1, "x": 1}'
    key, value = next(iter(endpoint.body.items()))
    return endpoint.raw()[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}".encode()


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


# (case, the bad body of an endpoint, what the detail says)
BAD_BODIES: list[tuple[str, Callable[[Endpoint], bytes], str]] = [
    ("duplicate key", duplicated, "appears twice in one object"),
    ("duplicate key deep", lambda e: e.raw('{"k": {"d": 1, "d": 2}}'), "appears twice"),
    ("NaN deep", lambda e: e.raw("[1, NaN]"), "NaN is not a JSON number"),
    ("Infinity deep", lambda e: e.raw('{"x": Infinity}'), "Infinity is not a JSON number"),
    ("-Infinity deep", lambda e: e.raw("-Infinity"), "-Infinity is not a JSON number"),
    ("1e400 deep", lambda e: e.raw("1e400"), "out of range"),
    ("lone surrogate", lambda e: e.raw('"a\\ud800b"'), "unpaired surrogate"),
    ("lone low surrogate", lambda e: e.raw('"\\udfff"'), "unpaired surrogate"),
    ("lone surrogate key", lambda e: e.raw('{"\\udc00": 1}'), "unpaired surrogate"),
    ("reversed pair", lambda e: e.raw('"\\ude00\\ud83d"'), "unpaired surrogate"),
    ("byte order mark", lambda e: b"\xef\xbb\xbf" + e.raw(), "byte order mark"),
    ("utf-16", lambda e: e.raw().decode().encode("utf-16"), "not UTF-8"),
    ("utf-16 without BOM", lambda e: e.raw().decode().encode("utf-16-le"), "not valid JSON"),
    ("latin-1 byte", lambda e: e.raw('"caf\xe9"').decode().encode("latin-1"), "not UTF-8"),
    ("trailing value", lambda e: e.raw() + b" {}", "Extra data"),
    ("trailing garbage", lambda e: e.raw() + b"x", "Extra data"),
    ("nested too deep", lambda e: e.raw(nested(MAX_JSON_DEPTH + 1)), "nested deeper"),
    ("nested very deep", lambda e: e.raw(nested(100_000)), "nested"),
]

# Media types that name JSON but are not the API's one.
REFUSED_MEDIA_TYPES = [
    "application/merge-patch+json",
    "application/vnd.foo+json",
    "application/json-patch+json",
    "text/json",
    "application/x-json",
    "application/json; charset=latin-1",
    "application/json; charset=utf-16",
    "application/json; charset=utf-8; profile=x",
    "application/json; foo=bar",
]
ACCEPTED_MEDIA_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/json;charset=UTF-8",
    'Application/JSON; Charset="utf-8"',
]


async def table_rows(db: asyncpg.Connection) -> dict[str, list[dict[str, Any]]]:
    return {
        table: [dict(r) for r in await db.fetch(f"SELECT * FROM {table} ORDER BY 1")]
        for table in ("ops_runs", "ops_audit", "activity_definitions")
    }


@pytest.fixture
async def rows(seeded: SeededQueue) -> Rows:
    lease = datetime.now(UTC) + timedelta(hours=1)
    claimed = await seeded.run(state="claimed", claim_owner=WORKER_ID, lease_until=lease, attempt=1)
    failed = await seeded.run(state="failed", attempt=1, last_error="x")
    return Rows(claimed=claimed, open=await seeded.run(), failed=failed)


@pytest.fixture(params=["fast-path", "routes"])
async def door(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[AppClient]:
    async with running_app(db_dsn, worker_fast_path=request.param == "fast-path") as client:
        yield client


async def post(
    client: AppClient, endpoint: Endpoint, raw: bytes, content_type: str | None = JSON_TYPE
) -> httpx.Response:
    headers = dict(CREDENTIALS[endpoint.who])
    if content_type is not None:
        headers["content-type"] = content_type
    return await client.http.post(endpoint.path, content=raw, headers=headers)


def assert_refused(response: httpx.Response, case: str, status: int, code: RefusalCode) -> str:
    assert response.status_code == status, f"{case}: {response.status_code} {response.text}"
    body = ErrorBody.model_validate_json(response.content)
    assert body.code == code, f"{case}: {response.text}"
    return body.detail


async def test_bad_json_is_a_422_naming_the_body_on_every_endpoint(
    door: AppClient, rows: Rows, db: asyncpg.Connection
) -> None:
    before = await table_rows(db)
    for endpoint in endpoints(rows):
        for case, bad, says in BAD_BODIES:
            where = f"{endpoint.name}: {case}"
            response = await post(door, endpoint, bad(endpoint))
            detail = assert_refused(response, where, 422, RefusalCode.invalid_request)
            assert says in detail, f"{where}: {detail}"
            assert response.json()["errors"] == [{"loc": [], "msg": detail, "type": "json_invalid"}]
    assert await table_rows(db) == before

    # The other side: paired surrogate escapes, raw UTF-8, the same key in different
    # objects, whitespace around the value and nesting right at the limit are JSON.
    complete = next(e for e in endpoints(rows) if e.name == "complete")
    # the inner value sits at depth 5 (body, result, deep, its item, this object): the
    # deepest list is exactly MAX_JSON_DEPTH
    inner = (
        '{"note": "\\ud83d\\ude00 caf\u00e9 \u2603", "a": {"k": 1}, "b": {"k": 2}, '
        f'"n": {nested(MAX_JSON_DEPTH - 5)}}}'
    )
    response = await post(door, complete, b" \r\n\t" + complete.raw(inner) + b"\n ")
    assert response.status_code == 200, response.text
    assert response.json()["close_disposition"] == "applied"


async def test_a_json_media_type_other_than_application_json_is_a_415(
    door: AppClient, rows: Rows, db: asyncpg.Connection
) -> None:
    before = await table_rows(db)
    for endpoint in endpoints(rows):
        for media_type in REFUSED_MEDIA_TYPES:
            response = await post(door, endpoint, endpoint.raw(), media_type)
            where = f"{endpoint.name}: {media_type}"
            detail = assert_refused(response, where, 415, RefusalCode.unsupported_media_type)
            assert "application/json" in detail and "errors" not in response.json(), where
    assert await table_rows(db) == before

    # application/json itself, with charset=utf-8 in any spelling, is taken
    claim = Endpoint("claim", "/ops-runs/claim", "worker", {"worker_id": WORKER_ID})
    expire = Endpoint("expire-leases", "/ops-runs/expire-leases", "operator", {})
    for media_type in ACCEPTED_MEDIA_TYPES:
        for endpoint in (claim, expire):
            response = await post(door, endpoint, endpoint.raw(), media_type)
            assert response.status_code == 200, f"{media_type}: {response.text}"


async def test_credentials_come_before_the_media_type_and_the_json(
    door: AppClient, rows: Rows, db: asyncpg.Connection
) -> None:
    """A body refused here is answered so only to a caller its endpoint accepts."""
    before = await table_rows(db)
    other = {"worker": "operator", "operator": "worker"}
    for endpoint in endpoints(rows):
        for raw, media_type, status, code in [
            (endpoint.raw(), "text/json", 415, RefusalCode.unsupported_media_type),
            (duplicated(endpoint), JSON_TYPE, 422, RefusalCode.invalid_request),
        ]:
            where = f"{endpoint.name}: {media_type}"
            for headers, expected in [
                ({}, (401, RefusalCode.unauthenticated)),
                (CREDENTIALS[other[endpoint.who]], (403, RefusalCode.forbidden)),
                (CREDENTIALS[endpoint.who], (status, code)),
            ]:
                response = await door.http.post(
                    endpoint.path, content=raw, headers={"content-type": media_type, **headers}
                )
                assert_refused(response, where, *expected)
    assert await table_rows(db) == before


# -- the parser and the media types themselves ----------------------------------------------


def test_strict_json_values() -> None:
    assert parse_strict_json(b'{"a": [1, 2.5, "\\ud83d\\ude00", {"a": null}]}') == {
        "a": [1, 2.5, "\U0001f600", {"a": None}]
    }
    assert parse_strict_json(b" 1e308 ") == 1e308
    for raw in [
        b'{"a": 1, "a": 1}',
        b'[{"b": {"c": 1, "d": 2, "c": 3}}]',
        b'["\\ud800"]',
        b'{"\\udbff": 1}',
        b"\xef\xbb\xbf{}",
        b"\xff\xfe{\x00}\x00",
        b"{} []",
        b"NaN",
        b"-1e400",
        nested(MAX_JSON_DEPTH + 1).encode(),
    ]:
        with pytest.raises(BodyRejected) as refused:
            parse_strict_json(raw)
        assert refused.value.code is RefusalCode.invalid_request, raw
        assert refused.value.status == 422, raw


# Strings that may hold a lone surrogate or brackets, so bodies come with and without an
# escape that names a surrogate, and with bracket counts on both sides of the depth bound.
_TEXTS = st.text(
    alphabet=st.sampled_from(["a", "[", "{", "\\", "\ud800", "\udfff", "\U0001f600"]),
    max_size=4,
)


def _containers_of(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=3) | st.dictionaries(_TEXTS, children, max_size=3)


_VALUES = st.recursive(st.none() | st.integers() | _TEXTS, _containers_of, max_leaves=40)


def _nest(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


@settings(max_examples=300)
@given(_VALUES, st.integers(0, MAX_JSON_DEPTH + 3), st.booleans())
def test_a_body_is_refused_exactly_when_its_whole_tree_breaks_a_rule(
    value: Any, extra_depth: int, ascii_only: bool
) -> None:
    # parse_strict_json walks the tree only when the bytes do not already rule out a
    # surrogate and a depth beyond the bound; its verdict is always the full walk's.
    body = json.dumps(_nest(value, extra_depth), ensure_ascii=ascii_only).encode(
        "utf-8", "surrogatepass"
    )
    try:
        walked = json.loads(body.decode("utf-8"))
        check_tree(walked)
    except (UnicodeDecodeError, BodyRejected):
        with pytest.raises(BodyRejected):
            parse_strict_json(body)
        return
    assert parse_strict_json(body) == walked


def test_the_media_types() -> None:
    for media_type in ACCEPTED_MEDIA_TYPES:
        assert accepts_json(media_type) and names_json(media_type), media_type
    for media_type in REFUSED_MEDIA_TYPES:
        assert not accepts_json(media_type) and names_json(media_type), media_type
    for other in [
        None,
        "",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ]:
        assert not accepts_json(other) and not names_json(other), other
