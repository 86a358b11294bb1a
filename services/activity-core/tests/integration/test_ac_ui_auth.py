"""Operator auth on the artefact JSON and the ops UI: a bearer header, or (UI pages only)
the server-side session the sign-in form opens; never a token in the cookie; open only
in local dev. Sessions, throttling and CSRF in depth: test_ac_ui_sessions.py."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from ac_fires import SeededAutomations, at, completed_result
from ac_testkit import OPERATOR_TOKEN, WORKER_TOKEN, AppClient
from ac_ui import FORM, ORIGIN, cookie_of, login, session, signed_in
from activity_core.operator.sessions import SESSION_LIFETIME

# A well-formed session id no session has.
UNKNOWN_SESSION = "s1." + "A" * 43


@pytest.fixture
async def fire(db: asyncpg.Connection) -> str:
    seed = SeededAutomations(db)
    a = await seed.automation("brief", "FI daily brief", cron="0 6 * * *", timezone="UTC")
    _, run = await seed.fire(a, started_at=at(0), finished_at=at(5), run_id="run-77778888")
    await seed.ops_run(
        a,
        triggering_event_id="run-77778888",
        created_at=at(1),
        state="succeeded",
        attempt=1,
        claim_owner="rein-aharness@railiance01",
        result=completed_result(),
    )
    return run


# -- JSON -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "unauthenticated"),
        ({"authorization": "Bearer wrong-token-0123456789"}, 401, "unauthenticated"),
        ({"authorization": f"Bearer {WORKER_TOKEN}"}, 403, "forbidden"),
        (session(OPERATOR_TOKEN), 401, "unauthenticated"),
        (session(UNKNOWN_SESSION), 401, "unauthenticated"),
        ({"authorization": f"Bearer {OPERATOR_TOKEN}"}, 200, None),
        ({"x-operator-token": OPERATOR_TOKEN}, 200, None),
    ],
    ids=[
        "none",
        "wrong-bearer",
        "worker-bearer",
        "raw-token-cookie",
        "unknown-session",
        "operator-bearer",
        "operator-header",
    ],
)
async def test_json_endpoints_need_an_operator(
    api: AppClient, fire: str, headers: dict[str, str], status: int, code: str | None
) -> None:
    for path in (
        "/ops/automations",
        "/ops/automations/brief/runs",
        f"/ops/automations/brief/runs/{fire}",
    ):
        response = await api.http.get(path, headers=headers)
        assert response.status_code == status, (path, response.text)
        if code is not None:
            assert response.json()["code"] == code


async def test_a_ui_session_never_opens_the_json_api(api: AppClient, fire: str) -> None:
    # The cookie is the UI's: the JSON API, whose actions take no CSRF token, never reads it.
    cookie = await signed_in(api.http)
    assert (await api.http.get("/ops/ui/", headers=session(cookie))).status_code == 200
    for path in ("/ops/automations", "/ops-runs", "/ops/workers"):
        response = await api.http.get(path, headers=session(cookie))
        assert response.status_code == 401, path
    cancel = await api.http.post(
        "/ops-runs/00000000-0000-4000-8000-000000000001/cancel",
        json={"reason": "x"},
        headers=session(cookie),
    )
    assert cancel.status_code == 401


# -- UI ---------------------------------------------------------------------------------


async def test_pages_redirect_to_login_without_a_credential(api: AppClient, fire: str) -> None:
    for path in ("/ops/ui/", "/ops/ui/automations/brief", f"/ops/ui/automations/brief/runs/{fire}"):
        for headers in (
            {},
            session(OPERATOR_TOKEN),
            session(UNKNOWN_SESSION),
            {"authorization": "Bearer wrong-token-0123456789"},
        ):
            response = await api.http.get(path, headers=headers)
            assert response.status_code == 303, (path, headers)
            location = httpx.URL(response.headers["location"])
            assert location.path == "/ops/ui/login"
            assert location.params["next"] == path


async def test_login_opens_a_server_side_strict_httponly_session(
    api: AppClient, fire: str, db: asyncpg.Connection
) -> None:
    form = await api.http.get("/ops/ui/login", params={"next": "/ops/ui/automations/brief"})
    assert form.status_code == 200
    assert 'name="name"' in form.text
    assert 'name="token"' in form.text and 'type="password"' in form.text

    target = f"/ops/ui/automations/brief/runs/{fire}"
    response = await login(api.http, next_path=target)
    assert response.status_code == 303
    assert response.headers["location"] == target
    (set_cookie,) = response.headers.get_list("set-cookie")
    attributes = [part.strip() for part in set_cookie.split(";")]
    flags = {a.split("=")[0].lower(): a.partition("=")[2] for a in attributes[1:]}
    value = cookie_of(response)
    assert "httponly" in flags
    assert flags["samesite"].lower() == "strict"
    assert flags["path"] == "/ops/ui"
    assert "secure" not in flags  # plain http, and no https public URL
    assert int(flags["max-age"]) == int(SESSION_LIFETIME.total_seconds())
    assert OPERATOR_TOKEN not in set_cookie
    # the table keeps a digest of the id, never the id itself
    rows = await db.fetch("SELECT * FROM ops_ui_sessions")
    assert len(rows) == 1 and rows[0]["operator"] == "operator"
    assert value not in repr(dict(rows[0])) and OPERATOR_TOKEN not in repr(dict(rows[0]))

    page = await api.http.get(target, headers=session(value))
    assert page.status_code == 200
    assert "FI daily brief" in page.text
    assert "Sign out" in page.text

    # logged in: the login form sends you on
    again = await api.http.get("/ops/ui/login", headers=session(value))
    assert again.status_code == 303 and again.headers["location"] == "/ops/ui/"


@pytest.mark.parametrize("token", ["wrong-token-0123456789", WORKER_TOKEN, "", "x" * 5000])
async def test_a_wrong_token_rerenders_the_form_without_detail(api: AppClient, token: str) -> None:
    response = await login(api.http, token)
    assert response.status_code == 401
    assert "set-cookie" not in response.headers
    assert "Sign-in failed." in response.text
    assert 'name="token"' in response.text
    for hint in ("worker", "invalid", "unauthenticated", "forbidden", "not_found"):
        assert hint not in response.text.lower().replace("worker_", "")


async def test_login_ignores_an_offsite_next(api: AppClient) -> None:
    for next_path in (
        "https://evil.example/",
        "//evil.example/ops/ui/",
        "/ops/ui/\\evil",
        "/ops/ui//evil.example",
        "/elsewhere",
        "javascript:alert(1)",
    ):
        response = await login(api.http, next_path=next_path)
        assert response.status_code == 303
        assert response.headers["location"] == "/ops/ui/", next_path


async def test_a_non_form_login_body_is_refused_415(api: AppClient) -> None:
    response = await api.http.post(
        "/ops/ui/login",
        json={"name": "operator", "token": OPERATOR_TOKEN},
        headers={"content-type": "application/json", "origin": ORIGIN},
    )
    assert response.status_code == 415
    assert "set-cookie" not in response.headers


async def test_logout_ends_the_session_and_clears_the_cookie(api: AppClient) -> None:
    cookie = await signed_in(api.http)
    page = await api.http.get("/ops/ui/", headers=session(cookie))
    csrf = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    response = await api.http.post(
        "/ops/ui/logout",
        content=f"csrf_token={csrf}",
        headers={**FORM, "origin": ORIGIN, **session(cookie)},
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/ops/ui/login"
    cleared = response.headers["set-cookie"].lower()
    assert cleared.startswith('ops_session="";') or cleared.startswith("ops_session=;")
    assert "max-age=0" in cleared and "path=/ops/ui" in cleared
    # the cookie a copy of this browser still holds opens nothing any more
    replay = await api.http.get("/ops/ui/", headers=session(cookie))
    assert replay.status_code == 303


async def test_bearer_header_opens_pages(api: AppClient, fire: str) -> None:
    response = await api.http.get(
        f"/ops/ui/automations/brief/runs/{fire}", headers=api.operator_headers()
    )
    assert response.status_code == 200
    assert "Sign out" not in response.text  # nothing to sign out of


async def test_a_worker_token_is_not_an_operator_on_pages(api: AppClient) -> None:
    response = await api.http.get("/ops/ui/", headers={"authorization": f"Bearer {WORKER_TOKEN}"})
    assert response.status_code == 403
    assert "text/html" in response.headers["content-type"]


async def test_pages_carry_security_headers(api: AppClient, fire: str) -> None:
    for path, headers in (
        ("/ops/ui/login", {}),
        ("/ops/ui/", api.operator_headers()),
        (f"/ops/ui/automations/brief/runs/{fire}", api.operator_headers()),
        ("/ops/ui/automations/nope", api.operator_headers()),
        ("/ops/ui/static/ops.css", {}),
        ("/ops/ui/", {}),
    ):
        response = await api.http.get(path, headers=headers)
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "script-src" not in csp and "unsafe-inline" not in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"
        assert response.headers["x-content-type-options"] == "nosniff"
    page = await api.http.get("/ops/ui/", headers=api.operator_headers())
    assert "<script" not in page.text
    assert page.headers["cache-control"] == "no-store"
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page.text


async def test_unknown_pages_are_html_not_found(api: AppClient, fire: str) -> None:
    h = api.operator_headers()
    for path in ("/ops/ui/automations/nope", "/ops/ui/automations/brief/runs/nope"):
        response = await api.http.get(path, headers=h)
        assert response.status_code == 404
        assert "text/html" in response.headers["content-type"]
        assert "Not found" in response.text


async def test_values_are_escaped(api: AppClient, db: asyncpg.Connection) -> None:
    seed = SeededAutomations(db)
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    a = await seed.automation("evil", evil)
    _, run = await seed.fire(a, started_at=at(0), finished_at=at(1), run_id="run-evil-0001")
    await seed.ops_run(
        a,
        triggering_event_id="run-evil-0001",
        created_at=at(0.5),
        title=evil,
        state="failed",
        last_error=evil,
        labels=[evil],
        result=completed_result(path='a/"><script>x</script>.md'),
    )
    h = api.operator_headers()
    for path in ("/ops/ui/", "/ops/ui/automations/evil", f"/ops/ui/automations/evil/runs/{run}"):
        response = await api.http.get(path, headers=h)
        assert response.status_code == 200
        assert "<script>" not in response.text and "<img" not in response.text
        assert "&lt;script&gt;" in response.text
    detail = await api.http.get(f"/ops/ui/automations/evil/runs/{run}", headers=h)
    # shown as text; no Forgejo link, since the commit was never published (the published
    # link's percent-encoding is tested with the artefact links)
    assert "&lt;script&gt;x&lt;/script&gt;.md" in detail.text
    assert "/src/commit/" not in detail.text


async def test_the_run_page_refreshes_only_while_work_is_open(
    api: AppClient, db: asyncpg.Connection
) -> None:
    seed = SeededAutomations(db)
    a = await seed.automation("live")
    _, busy = await seed.fire(a, started_at=at(0), finished_at=at(1), run_id="run-busy-0001")
    _, done = await seed.fire(a, started_at=at(100), finished_at=at(101), run_id="run-done-0001")
    _, idle = await seed.fire(a, started_at=at(200), finished_at=at(201), run_id="run-idle-0001")
    await seed.ops_run(a, triggering_event_id="run-busy-0001", created_at=at(0.5), state="claimed")
    await seed.ops_run(
        a, triggering_event_id="run-busy-0001", created_at=at(0.6), state="succeeded"
    )
    await seed.ops_run(a, triggering_event_id="run-done-0001", created_at=at(100.5), state="failed")
    del idle
    h = api.operator_headers()
    refresh = '<meta http-equiv="refresh" content="10">'
    busy_page = await api.http.get(f"/ops/ui/automations/live/runs/{busy}", headers=h)
    done_page = await api.http.get(f"/ops/ui/automations/live/runs/{done}", headers=h)
    index = await api.http.get("/ops/ui/", headers=h)
    assert refresh in busy_page.text
    assert refresh not in done_page.text
    assert refresh not in index.text


@pytest.mark.parametrize(
    ("env", "status"),
    [
        (
            {"ACTIVITY_CORE_OPERATOR_TOKEN": None, "ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS": "1"},
            200,
        ),
        ({"ACTIVITY_CORE_OPERATOR_TOKEN": None}, 403),
    ],
    ids=["local-dev-open", "no-token-refused"],
)
async def test_without_an_operator_token(
    app_factory: Any, fire: str, env: dict[str, Any], status: int
) -> None:
    api = await app_factory(**env)
    for path in ("/ops/ui/", f"/ops/ui/automations/brief/runs/{fire}"):
        response = await api.http.get(path)
        assert response.status_code == status, path
        assert "text/html" in response.headers["content-type"]
    login_page = await api.http.get("/ops/ui/login")
    assert login_page.status_code == (303 if status == 200 else 403)
    posted = await login(api.http, "anything-0123456789")
    assert posted.status_code == (303 if status == 200 else 403)
    assert "set-cookie" not in posted.headers
