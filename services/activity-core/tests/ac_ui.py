"""Driving the ops UI's forms the way a browser does: sign in with name and token, read
the session's CSRF token from a page, post forms from the UI's own origin."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from ac_testkit import OPERATOR_TOKEN

# Named operators of the operators file `named_operators` writes.
ALICE = "alice-token-0123456789abcdef"  # an operator
BOB = "bob-viewer-token-0123456789"  # a viewer
FORM = {"content-type": "application/x-www-form-urlencoded"}
ORIGIN = "http://activity-core.test"  # the test clients' base URL
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def form_body(fields: dict[str, Any] | list[tuple[str, str]]) -> str:
    if isinstance(fields, dict):
        return str(httpx.QueryParams(fields))
    pairs: list[tuple[str, str | int | float | bool | None]] = list(fields)
    return str(httpx.QueryParams(pairs))


async def login(
    http: httpx.AsyncClient,
    token: str = OPERATOR_TOKEN,
    name: str = "operator",
    next_path: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    fields = {"name": name, "token": token, **({"next": next_path} if next_path else {})}
    return await http.post(
        "/ops/ui/login",
        content=form_body(fields),
        headers={**FORM, "origin": ORIGIN, **(headers or {})},
    )


def cookie_of(response: httpx.Response) -> str:
    """The session id a sign-in answer sets."""
    (set_cookie,) = response.headers.get_list("set-cookie")
    name, _, rest = set_cookie.partition("=")
    assert name == "ops_session", set_cookie
    return rest.split(";")[0]


def session(value: str) -> dict[str, str]:
    return {"cookie": f"ops_session={value}"}


async def signed_in(
    http: httpx.AsyncClient, token: str = OPERATOR_TOKEN, name: str = "operator"
) -> str:
    response = await login(http, token, name)
    assert response.status_code == 303, response.text
    return cookie_of(response)


def csrf_in(html: str) -> str:
    match = _CSRF.search(html)
    assert match is not None, "the page carries no CSRF token"
    return match.group(1)


async def csrf_of(http: httpx.AsyncClient, cookie: str, path: str = "/ops/ui/runs") -> str:
    response = await http.get(path, headers=session(cookie))
    assert response.status_code == 200, response.text
    return csrf_in(response.text)


async def post_form(
    http: httpx.AsyncClient,
    path: str,
    fields: dict[str, Any] | list[tuple[str, str]],
    cookie: str | None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await http.post(
        path,
        content=form_body(fields),
        headers={
            **FORM,
            "origin": ORIGIN,
            **(session(cookie) if cookie else {}),
            **(headers or {}),
        },
    )


async def cancel_form(
    http: httpx.AsyncClient,
    run: uuid.UUID,
    fields: dict[str, Any],
    cookie: str | None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """The run page's cancel form posted (`post_form`) for `run`."""
    return await post_form(http, f"/ops/ui/runs/{run}/cancel", fields, cookie, headers)


def now() -> datetime:
    return datetime.now().astimezone()


def token_digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def named_operators(path: Path, operators: dict[str, Any] | None = None) -> str:
    """An operators file (ACTIVITY_CORE_OPERATORS_FILE): `operators`, by default alice
    (operator) and bob (viewer). Its path, as the setting takes it."""
    if operators is None:
        operators = {
            "alice": {"token": token_digest(ALICE), "role": "operator"},
            "bob": {"token": token_digest(BOB), "role": "viewer"},
        }
    path.write_text(json.dumps({"operators": operators}), encoding="utf-8")
    return str(path)
