"""Whose word names the client: `activity-core serve` as a real process, over a real
socket from 127.0.0.1. X-Forwarded-For and X-Forwarded-Proto are believed only from the
peers ACTIVITY_CORE_TRUSTED_PROXIES lists; from anyone else, a process on the same host
included, they change nothing: not the address the sign-in throttle counts, not the
scheme the UI's origin check and Secure cookie go by."""

from __future__ import annotations

import asyncpg
import httpx
import pytest

from ac_serve import assert_stopped_naming, clean_env, run_cli, serve_env, serve_process
from ac_testkit import OPERATOR_TOKEN
from ac_ui import login
from activity_core.operator.sessions import LOGIN_LIMIT_PER_CLIENT
from activity_core.settings import SettingsError, load_settings, parse_trusted_proxies

WRONG_TOKEN = "wrong-token-0123456789"
UNREACHABLE_URL = "postgresql://nobody@127.0.0.1:1/none"


def forwarded(client: str, proto: str = "http") -> dict[str, str]:
    return {"x-forwarded-for": client, "x-forwarded-proto": proto}


async def failure_subjects(db: asyncpg.Connection) -> list[str]:
    rows = await db.fetch(
        "SELECT subject FROM ops_ui_login_failures WHERE scope = 'client' ORDER BY id"
    )
    return [row["subject"] for row in rows]


async def test_forwarded_headers_from_an_untrusted_peer_change_nothing(
    db_dsn: str, db: asyncpg.Connection
) -> None:
    # uvicorn's own variable would trust everyone; serve does not read it
    env = serve_env(db_dsn, ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN, FORWARDED_ALLOW_IPS="*")
    async with (
        serve_process(env) as (_, url),
        httpx.AsyncClient(base_url=url, trust_env=False) as http,
    ):
        origin = {"origin": url}
        # a claimed https is not this request's scheme: the http origin is the one that
        # matches, and the cookie is not Secure
        signed_in = await login(http, headers={**origin, **forwarded("198.51.100.1", "https")})
        assert signed_in.status_code == 303, signed_in.text
        assert "secure" not in signed_in.headers["set-cookie"].lower()
        for n in range(LOGIN_LIMIT_PER_CLIENT):
            refused = await login(
                http, WRONG_TOKEN, headers={**origin, **forwarded(f"203.0.113.{n}")}
            )
            assert refused.status_code == 401
        # a fresh address in the header does not make a fresh client
        throttled = await login(http, headers={**origin, **forwarded("203.0.113.200")})
        assert throttled.status_code == 429
    assert await failure_subjects(db) == ["127.0.0.1"] * LOGIN_LIMIT_PER_CLIENT


@pytest.mark.parametrize("args", [(), ("--workers", "2")], ids=["one-process", "workers"])
async def test_a_trusted_proxy_names_the_client_and_its_scheme(
    db_dsn: str, db: asyncpg.Connection, args: tuple[str, ...]
) -> None:
    env = serve_env(
        db_dsn,
        ACTIVITY_CORE_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ACTIVITY_CORE_TRUSTED_PROXIES="10.0.0.0/8, 127.0.0.1",
    )
    async with (
        serve_process(env, *args) as (_, url),
        httpx.AsyncClient(base_url=url, trust_env=False) as http,
    ):
        # the proxy terminated TLS: the browser's origin is https, and so is the cookie
        https_origin = {"origin": url.replace("http://", "https://")}
        signed_in = await login(
            http, headers={**https_origin, **forwarded("198.51.100.1", "https")}
        )
        assert signed_in.status_code == 303, signed_in.text
        assert "secure" in signed_in.headers["set-cookie"].lower()
        origin = {"origin": url}
        for _ in range(LOGIN_LIMIT_PER_CLIENT):
            refused = await login(http, WRONG_TOKEN, headers={**origin, **forwarded("203.0.113.7")})
            assert refused.status_code == 401
        throttled = await login(http, headers={**origin, **forwarded("203.0.113.7")})
        assert throttled.status_code == 429
        # another client behind the same proxy is not held by that one's failures
        other = await login(http, headers={**origin, **forwarded("203.0.113.8")})
        assert other.status_code == 303, other.text
    assert await failure_subjects(db) == ["203.0.113.7"] * LOGIN_LIMIT_PER_CLIENT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        (" , ", ()),
        ("127.0.0.1", ("127.0.0.1",)),
        ("10.42.0.0/16, fd00::/8", ("10.42.0.0/16", "fd00::/8")),
        ("0:0:0:0:0:0:0:1,::1", ("::1",)),
        ("0.0.0.0/0,::/0", ("0.0.0.0/0", "::/0")),
    ],
)
def test_trusted_proxies_are_read_in_their_canonical_form(
    text: str, expected: tuple[str, ...]
) -> None:
    assert parse_trusted_proxies(text) == expected
    assert load_settings(ACTIVITY_CORE_TRUSTED_PROXIES=text).trusted_proxies == expected


def test_no_trusted_proxies_by_default() -> None:
    assert load_settings().trusted_proxies == ()


@pytest.mark.parametrize(
    "text", ["*", "localhost", "10.0.0.1/8", "10.0.0.0/33", "10.0.0.1 10.0.0.2", "::1%eth0/64"]
)
def test_a_malformed_trusted_proxy_is_refused(text: str) -> None:
    with pytest.raises(SettingsError, match=r"^ACTIVITY_CORE_TRUSTED_PROXIES: must be"):
        load_settings(ACTIVITY_CORE_TRUSTED_PROXIES=text)


def test_a_malformed_trusted_proxy_stops_serve_before_anything_starts() -> None:
    completed = run_cli(
        "serve",
        "--port",
        "1",
        env=clean_env(
            ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL, ACTIVITY_CORE_TRUSTED_PROXIES="*"
        ),
    )
    line = assert_stopped_naming(completed, "ACTIVITY_CORE_TRUSTED_PROXIES")
    assert "0.0.0.0/0" in line
