"""The ops UI's sessions against the real database: server-side, revoked by sign-out and
by a changed credential, expiring, bound to a CSRF token; sign-in throttled per client
and per operator; forms taken only from the UI's own origin, as forms."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ac_serve import serve_env, serve_process
from ac_testkit import OPERATOR_TOKEN, AppClient, SeededQueue
from ac_ui import (
    ALICE,
    BOB,
    FORM,
    ORIGIN,
    cancel_form,
    csrf_of,
    login,
    named_operators,
    post_form,
    session,
    signed_in,
    token_digest,
)
from activity_core.operator.sessions import LOGIN_LIMIT_PER_CLIENT, LOGIN_LIMIT_PER_OPERATOR


@pytest.fixture
def named(tmp_path: Path) -> str:
    return named_operators(tmp_path / "operators.json")


def client_at(api: AppClient, address: str) -> httpx.AsyncClient:
    """Another browser, at another address, on the same app."""
    transport = httpx.ASGITransport(app=api.app, client=(address, 50000))
    return httpx.AsyncClient(transport=transport, base_url=ORIGIN)


async def state_of(db: asyncpg.Connection, run_id: Any) -> str:
    state: str = await db.fetchval("SELECT state FROM ops_runs WHERE id = $1", run_id)
    return state


# -- revocation -------------------------------------------------------------------------


async def test_signing_out_everywhere_ends_every_session_of_the_operator(
    api: AppClient, db: asyncpg.Connection
) -> None:
    first = await signed_in(api.http)
    second = await signed_in(api.http)
    assert await db.fetchval("SELECT count(*) FROM ops_ui_sessions") == 2
    csrf = await csrf_of(api.http, first)
    out = await post_form(
        api.http, "/ops/ui/logout", {"csrf_token": csrf, "everywhere": "1"}, first
    )
    assert out.status_code == 303
    for cookie in (first, second):
        assert (await api.http.get("/ops/ui/runs", headers=session(cookie))).status_code == 303
    assert await db.fetchval("SELECT count(*) FROM ops_ui_sessions") == 0


async def test_a_logout_without_the_sessions_token_ends_nothing(
    api: AppClient, db: asyncpg.Connection
) -> None:
    cookie = await signed_in(api.http)
    refused = await post_form(api.http, "/ops/ui/logout", {"everywhere": "1"}, cookie)
    assert refused.status_code == 403
    assert (await api.http.get("/ops/ui/runs", headers=session(cookie))).status_code == 200


async def test_a_rotated_token_ends_the_sessions_signed_in_with_the_old_one(
    app_factory: Any,
) -> None:
    before = await app_factory()
    cookie = await signed_in(before.http)
    assert (await before.http.get("/ops/ui/", headers=session(cookie))).status_code == 200
    # the same database, restarted with a new operator token
    after = await app_factory(ACTIVITY_CORE_OPERATOR_TOKEN="a-rotated-operator-token-0123")
    refused = await after.http.get("/ops/ui/", headers=session(cookie))
    assert refused.status_code == 303
    assert "ops_session=" in refused.headers["set-cookie"]  # cleared
    assert (await after.http.get("/ops/ui/", headers=session(cookie))).status_code == 303


async def test_a_removed_operator_loses_its_sessions_and_a_demoted_one_can_only_read(
    app_factory: Any, tmp_path: Path, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    path = tmp_path / "operators.json"
    named_operators(
        path,
        {
            "alice": {"token": token_digest(ALICE), "role": "operator"},
            "carol": {"token": token_digest("carol-token-0123456789ab"), "role": "operator"},
        },
    )
    api = await app_factory(ACTIVITY_CORE_OPERATORS_FILE=str(path))
    alice = await signed_in(api.http, ALICE, "alice")
    carol = await signed_in(api.http, "carol-token-0123456789ab", "carol")
    named_operators(
        path,
        {"alice": {"token": token_digest(ALICE), "role": "viewer"}},
    )
    restarted = await app_factory(ACTIVITY_CORE_OPERATORS_FILE=str(path))
    assert (await restarted.http.get("/ops/ui/", headers=session(carol))).status_code == 303
    page = await restarted.http.get("/ops/ui/runs", headers=session(alice))
    assert page.status_code == 200 and "(viewer)" in page.text
    run = await seeded.run(state="failed", attempt=1, last_error="boom")
    csrf = await csrf_of(restarted.http, alice)
    refused = await post_form(
        restarted.http, f"/ops/ui/runs/{run}/requeue", {"csrf_token": csrf}, alice
    )
    assert refused.status_code == 403
    assert await db.fetchval("SELECT count(*) FROM ops_runs") == 1


async def test_sessions_expire_and_go_stale(api: AppClient, db: asyncpg.Connection) -> None:
    expired = await signed_in(api.http)
    idle = await signed_in(api.http)
    fresh = await signed_in(api.http)
    rows = {r["last_seen_at"] for r in await db.fetch("SELECT last_seen_at FROM ops_ui_sessions")}
    assert rows
    # by the database's clock: one past its absolute end, one idle past the idle limit
    await db.execute(
        "UPDATE ops_ui_sessions SET expires_at = now() - interval '1 s' WHERE id_digest = $1",
        hashlib.sha256(expired.encode()).hexdigest(),
    )
    await db.execute(
        "UPDATE ops_ui_sessions SET last_seen_at = now() - interval '2 h' WHERE id_digest = $1",
        hashlib.sha256(idle.encode()).hexdigest(),
    )
    assert (await api.http.get("/ops/ui/", headers=session(expired))).status_code == 303
    assert (await api.http.get("/ops/ui/", headers=session(idle))).status_code == 303
    assert (await api.http.get("/ops/ui/", headers=session(fresh))).status_code == 200
    # a new sign-in prunes the ended ones
    await signed_in(api.http)
    assert await db.fetchval("SELECT count(*) FROM ops_ui_sessions") == 2


# -- the sign-in throttle ---------------------------------------------------------------


async def test_sign_in_is_throttled_per_client(api: AppClient) -> None:
    for _ in range(LOGIN_LIMIT_PER_CLIENT):
        assert (await login(api.http, "wrong-token-0123456789")).status_code == 401
    throttled = await login(api.http)  # the right token: not even looked at
    assert throttled.status_code == 429
    assert 0 < int(throttled.headers["retry-after"]) <= 15 * 60 + 1
    assert "set-cookie" not in throttled.headers
    assert "Too many sign-in attempts" in throttled.text
    # another client is not throttled by this one's failures
    async with client_at(api, "10.9.8.7") as other:
        assert (await login(other)).status_code == 303


async def client_failures(db: asyncpg.Connection) -> int:
    count: int = await db.fetchval(
        "SELECT count(*) FROM ops_ui_login_failures WHERE scope = 'client'"
    )
    return count


@pytest.mark.parametrize("args", [(), ("--workers", "2")], ids=["one-process", "workers"])
async def test_parallel_wrong_sign_ins_are_held_to_the_limit(
    db_dsn: str, db: asyncpg.Connection, args: tuple[str, ...]
) -> None:
    """60 wrong sign-ins at once from one client, to a real `serve` (its own pool, and
    with --workers two processes on the database): at most the limit are looked at (401)
    and counted; the others are refused 429 without their token being compared."""
    env = serve_env(db_dsn, ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN)
    async with (
        serve_process(env, *args) as (_, url),
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=60) as http,
    ):
        origin = {"origin": url}
        burst = await asyncio.gather(
            *(login(http, "wrong-token-0123456789", headers=origin) for _ in range(60))
        )
        statuses = sorted(response.status_code for response in burst)
        assert set(statuses) <= {401, 429}, statuses
        looked_at = statuses.count(401)
        assert looked_at <= LOGIN_LIMIT_PER_CLIENT, statuses
        assert await client_failures(db) == looked_at
        # one at a time, the rest of the limit is still there to use, and no more
        for _ in range(LOGIN_LIMIT_PER_CLIENT - looked_at):
            assert (await login(http, "wrong-token-0123456789", headers=origin)).status_code == 401
        assert (await login(http, headers=origin)).status_code == 429
    assert await client_failures(db) == LOGIN_LIMIT_PER_CLIENT


async def test_sign_in_is_throttled_per_operator_across_clients(
    app_factory: Any, named: str
) -> None:
    api = await app_factory(ACTIVITY_CORE_OPERATORS_FILE=named)
    for n in range(LOGIN_LIMIT_PER_OPERATOR):
        async with client_at(api, f"10.0.{n // 200}.{n % 200 + 1}") as browser:
            assert (await login(browser, "wrong-token-0123456789", "alice")).status_code == 401
    async with client_at(api, "192.0.2.50") as fresh:
        refused = await login(fresh, ALICE, "alice")
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        # bob's sign-in from the same client is not held by alice's failures
        assert (await login(fresh, BOB, "bob")).status_code == 303


async def test_an_unknown_name_counts_against_the_client_only(
    app_factory: Any, named: str, db: asyncpg.Connection
) -> None:
    api = await app_factory(ACTIVITY_CORE_OPERATORS_FILE=named)
    assert (await login(api.http, ALICE, "mallory")).status_code == 401
    assert (await login(api.http, ALICE, "bad name\x00")).status_code == 401
    scopes = [r["scope"] for r in await db.fetch("SELECT scope FROM ops_ui_login_failures")]
    assert scopes == ["client", "client"]


async def test_the_right_token_under_another_name_fails(app_factory: Any, named: str) -> None:
    api = await app_factory(ACTIVITY_CORE_OPERATORS_FILE=named)
    response = await login(api.http, ALICE, "bob")
    assert response.status_code == 401 and "set-cookie" not in response.headers


# -- forms: origin, content type, CSRF ---------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "null"},
        {"origin": "http://activity-core.test:8080"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ],
    ids=["other-origin", "null-origin", "other-port", "cross-site", "same-site"],
)
async def test_forms_from_another_site_change_nothing(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, headers: dict[str, str]
) -> None:
    cookie = await signed_in(api.http)
    csrf = await csrf_of(api.http, cookie)
    run = await seeded.run(state="open")
    response = await cancel_form(
        api.http, run, {"csrf_token": csrf, "reason": "forged"}, cookie, headers=headers
    )
    assert response.status_code == 403
    assert await state_of(db, run) == "open"
    login_response = await login(api.http, headers=headers)
    assert login_response.status_code == 403 and "set-cookie" not in login_response.headers


async def test_a_form_without_origin_headers_is_held_to_its_token(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    cookie = await signed_in(api.http)
    csrf = await csrf_of(api.http, cookie)
    run = await seeded.run(state="open")
    body = httpx.QueryParams({"csrf_token": csrf, "reason": "no origin header"})
    response = await api.http.post(
        f"/ops/ui/runs/{run}/cancel", content=str(body), headers={**FORM, **session(cookie)}
    )
    assert response.status_code == 303
    assert await state_of(db, run) == "failed"


@pytest.mark.parametrize(
    "fields",
    [{"reason": "x"}, {"reason": "x", "csrf_token": ""}, {"reason": "x", "csrf_token": "A" * 43}],
    ids=["missing", "blank", "wrong"],
)
async def test_a_form_without_the_sessions_csrf_token_changes_nothing(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection, fields: dict[str, str]
) -> None:
    cookie = await signed_in(api.http)
    run = await seeded.run(state="open")
    response = await cancel_form(api.http, run, fields, cookie)
    assert response.status_code == 403
    assert "CSRF" in response.text
    assert await state_of(db, run) == "open"
    audit = await db.fetchval("SELECT count(*) FROM ops_audit WHERE action = 'cancel'")
    assert audit == 0


async def test_another_sessions_csrf_token_is_refused(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    mine = await signed_in(api.http)
    theirs = await signed_in(api.http)
    their_token = await csrf_of(api.http, theirs)
    assert their_token != await csrf_of(api.http, mine)
    run = await seeded.run(state="open")
    response = await cancel_form(api.http, run, {"csrf_token": their_token, "reason": "x"}, mine)
    assert response.status_code == 403
    assert await state_of(db, run) == "open"


async def test_forms_take_only_the_form_content_type(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    cookie = await signed_in(api.http)
    csrf = await csrf_of(api.http, cookie)
    run = await seeded.run(state="open")
    for content_type, body in (
        ("application/json", json.dumps({"csrf_token": csrf, "reason": "x"})),
        # not JSON at all: the API's body guard hands the UI's requests on unread
        ("application/json", f"csrf_token={csrf}&reason=x"),
        ("application/merge-patch+json", json.dumps({"csrf_token": csrf, "reason": "x"})),
        ("multipart/form-data; boundary=x", f"csrf_token={csrf}&reason=x"),
        ("text/plain", f"csrf_token={csrf}&reason=x"),
    ):
        response = await api.http.post(
            f"/ops/ui/runs/{run}/cancel",
            content=body,
            headers={"content-type": content_type, "origin": ORIGIN, **session(cookie)},
        )
        # the UI's form check, answered as a page like every refusal of the UI
        assert response.status_code == 415, (content_type, body, response.text)
        assert response.headers["content-type"].startswith("text/html"), content_type
        assert '<code data-field="code">unsupported_media_type</code>' in response.text
    assert await state_of(db, run) == "open"


async def test_a_header_credential_cannot_post_ui_forms(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    run = await seeded.run(state="open")
    response = await cancel_form(
        api.http, run, {"reason": "x"}, None, headers=api.operator_headers()
    )
    assert response.status_code == 403
    assert await state_of(db, run) == "open"


async def test_an_oversized_form_is_refused(api: AppClient, seeded: SeededQueue) -> None:
    cookie = await signed_in(api.http)
    run = await seeded.run(state="open")
    response = await cancel_form(api.http, run, {"reason": "x" * 70_000}, cookie)
    assert response.status_code == 413


# -- the public URL ----------------------------------------------------------------------


async def test_the_public_url_sets_secure_cookies_and_the_expected_origin(
    app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    api = await app_factory(ACTIVITY_CORE_PUBLIC_URL="https://ops.example.org")
    public = {"origin": "https://ops.example.org"}
    # the request reached us over plain http from the TLS proxy: the cookie is Secure anyway
    response = await login(api.http, headers=public)
    assert response.status_code == 303
    assert "secure" in response.headers["set-cookie"].lower()
    cookie = response.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    # the proxy's own origin is not the UI's
    assert (await login(api.http)).status_code == 403
    csrf = await csrf_of(api.http, cookie)
    run = await seeded.run(state="open")
    ok = await cancel_form(
        api.http, run, {"csrf_token": csrf, "reason": "x"}, cookie, headers=public
    )
    assert ok.status_code == 303
    assert await state_of(db, run) == "failed"


@pytest.mark.parametrize(
    "value", ["ops.example.org", "https://ops.example.org/path", "ftp://x", "https://u:p@x"]
)
def test_a_public_url_that_is_not_an_origin_stops_the_service(value: str) -> None:
    from activity_core.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match="ACTIVITY_CORE_PUBLIC_URL"):
        load_settings(ACTIVITY_CORE_PUBLIC_URL=value)


# -- an open operator plane (local development) -----------------------------------------


async def test_an_open_plane_gives_each_browser_an_anonymous_session_with_a_token(
    app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    api = await app_factory(
        ACTIVITY_CORE_OPERATOR_TOKEN=None, ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS="1"
    )
    first = await api.http.get("/ops/ui/runs")
    assert first.status_code == 200
    cookie = first.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    run = await seeded.run(state="open")
    refused = await cancel_form(api.http, run, {"reason": "x"}, cookie)
    assert refused.status_code == 403
    csrf = await csrf_of(api.http, cookie)
    ok = await cancel_form(api.http, run, {"csrf_token": csrf, "reason": "x"}, cookie)
    assert ok.status_code == 303
    assert await db.fetchval("SELECT cancelled_by FROM ops_runs WHERE id = $1", run) == "anonymous"


async def test_a_session_of_an_open_plane_is_nothing_once_credentials_exist(
    app_factory: Any,
) -> None:
    open_api = await app_factory(
        ACTIVITY_CORE_OPERATOR_TOKEN=None, ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS="1"
    )
    first = await open_api.http.get("/ops/ui/")
    cookie = first.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    closed = await app_factory()
    assert (await closed.http.get("/ops/ui/", headers=session(cookie))).status_code == 303
