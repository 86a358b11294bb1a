"""Every route, every parameter, edge values: never a 5xx, every refusal documented, and a
refused request changes nothing.

The routes are read from each `http/routes_*.py` module's routers (`router.routes`: the
app keeps an included router whole, so `app.routes` would hide them), JSON API and ops UI
alike. Each request carries the credential its route takes (a worker's or an operator's
token; for the UI a signed-in session, its CSRF token and its own origin on a form) and a
valid body, so that the one edge value it carries is what the app has to answer. Edges
(ac_edges.py) go into every path parameter, every query parameter (those FastAPI declares
and those the UI reads from the query string itself), every form field the UI reads, and
every header the app reads.

The answer to each request is counted by status, and checked: no 5xx; a 4xx of the JSON
API is an ErrorBody with a RefusalCode (an `invalid_request` names its fields); a 4xx of
the UI is an HTML page with the refusal's code (or the sign-in form, for a failed sign-in);
and when it is a refusal, the database is as it was before it. The failure message lists
the requests that broke a rule, and the counts.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import typing
import urllib.parse
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import APIRouter
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

import activity_core.http
from ac_edges import HEADER_VALUES, KINDS, Raw, header_values, sample
from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, AppClient, SeededQueue
from ac_ui import ORIGIN, csrf_in, signed_in
from activity_core.http.credentials import Credential, credential_of
from activity_core.ui.run_filters import RUN_FILTER_FIELDS
from ops_contracts import ErrorBody, RefusalCode

# Generated values per parameter beside its named edges, and named header edges per
# header per route (rotating, so that every edge meets every header over the walk).
GENERATED = 8
HEADER_EDGES_PER_ROUTE = 5
UI = "/ops/ui"
MISSING_AUTOMATION = "no-such-automation"

# Query parameters and form fields the UI reads itself (request.query_params, its form
# parser), which FastAPI cannot list: (method, route path) -> name -> kind.
UNDECLARED_QUERY: dict[tuple[str, str], dict[str, str]] = {
    ("GET", "/ops/ui/runs"): {
        **{name: "text" for name in RUN_FILTER_FIELDS},
        "created_after": "instant",
        "created_before": "instant",
        "cursor": "cursor",
    },
    ("GET", "/ops/ui/dead-letter"): {"automation": "text", "requeued": "text", "cursor": "cursor"},
    ("GET", "/ops/ui/runs/{run_id}"): {"done": "text"},
}
FORM_FIELDS: dict[tuple[str, str], dict[str, str]] = {
    ("POST", "/ops/ui/login"): {"name": "text", "token": "text", "next": "text"},
    ("POST", "/ops/ui/logout"): {"csrf_token": "text", "everywhere": "text"},
    ("POST", "/ops/ui/runs/{run_id}/cancel"): {"reason": "text", "csrf_token": "text"},
    ("POST", "/ops/ui/runs/{run_id}/requeue"): {"csrf_token": "text"},
    ("POST", "/ops/ui/runs/{run_id}/publish"): {"csrf_token": "text"},
    ("POST", "/ops/ui/dead-letter/requeue"): {
        "run_id": "uuid",
        "one": "uuid",
        "automation": "text",
        "csrf_token": "text",
    },
    ("POST", "/ops/ui/automations/{automation_id}/pause"): {"reason": "text"},
    ("POST", "/ops/ui/automations/{automation_id}/resume"): {"reason": "text"},
}
# Every header the app reads, on every route.
HEADERS = (
    "authorization",
    "x-worker-token",
    "x-operator-token",
    "content-type",
    "origin",
    "sec-fetch-site",
    "x-request-id",
    "cookie",
)
# The sign-in throttle counts failed sign-ins per client, and signing out ends the
# walker's session: those two routes go last (the walk signs in again after a sign-out).
LAST = ("/ops/ui/logout", "/ops/ui/login")


@dataclass(frozen=True)
class Param:
    where: str  # path | query | header | form
    name: str
    kind: str  # a key of ac_edges.KINDS, or header


@dataclass(frozen=True)
class Route:
    module: str
    method: str
    path: str
    credential: Credential | None
    params: tuple[Param, ...]

    @property
    def ui(self) -> bool:
        return self.path == UI or self.path.startswith(UI + "/")

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def _kind(name: str, annotation: Any) -> str:
    types: list[Any] = []
    stack = [annotation]
    while stack:
        node = stack.pop()
        args = typing.get_args(node)
        if args and typing.get_origin(node) is not None:
            stack.extend(args)
        else:
            types.append(node)
    if uuid.UUID in types:
        return "uuid"
    if datetime in types or any(getattr(t, "__name__", "") == "AwareDatetime" for t in types):
        return "instant"
    if bool in types:
        return "text"  # true/false: any other text is the edge
    if int in types:
        return "int"
    if any(isinstance(t, type) and issubclass(t, Enum) for t in types):
        return "text"
    if name == "cursor":
        return "cursor"
    return "text"


def _declared(dependant: Dependant) -> Iterator[Param]:
    for where, fields in (
        ("path", dependant.path_params),
        ("query", dependant.query_params),
        ("header", dependant.header_params),
    ):
        for f in fields:
            name = f.alias or f.name
            yield Param(
                where, name, "header" if where == "header" else _kind(name, f.field_info.annotation)
            )
    for sub in dependant.dependencies:
        yield from _declared(sub)


def _routers() -> Iterator[tuple[str, APIRouter]]:
    for info in pkgutil.iter_modules(activity_core.http.__path__):
        if not info.name.startswith("routes_"):
            continue
        module = importlib.import_module(f"activity_core.http.{info.name}")
        for value in vars(module).values():
            if isinstance(value, APIRouter):
                yield info.name, value


def every_route() -> list[Route]:
    routes: dict[tuple[str, str], Route] = {}
    for module, router in _routers():
        for route in router.routes:
            assert isinstance(route, APIRoute), route
            for method in sorted(route.methods or ()):
                key = (method, route.path)
                params = {(p.where, p.name): p for p in _declared(route.dependant)}
                for name, kind in UNDECLARED_QUERY.get(key, {}).items():
                    params[("query", name)] = Param("query", name, kind)
                for name, kind in FORM_FIELDS.get(key, {}).items():
                    params[("form", name)] = Param("form", name, kind)
                for header in HEADERS:
                    params.setdefault(("header", header), Param("header", header, "header"))
                routes[key] = Route(
                    module, method, route.path, credential_of(route), tuple(params.values())
                )
    return sorted(
        routes.values(),
        key=lambda r: (LAST.index(r.path) + 1 if r.path in LAST else 0, r.path, r.method),
    )


ROUTES = every_route()


def test_the_walk_covers_the_routes_and_the_tables_are_current() -> None:
    keys = {(r.method, r.path) for r in ROUTES}
    for table in (UNDECLARED_QUERY, FORM_FIELDS):
        assert set(table) <= keys, set(table) - keys
    # every UI form that acts is in FORM_FIELDS, so its fields are walked too
    ui_posts = {(r.method, r.path) for r in ROUTES if r.ui and r.method == "POST"}
    assert ui_posts == set(FORM_FIELDS), ui_posts ^ set(FORM_FIELDS)
    modules = {r.module for r in ROUTES}
    assert {"routes_queue", "routes_operator", "routes_ui", "routes_health"} <= modules


# -- the database before and after ---------------------------------------------------------

# Written by design on a refusal, or by the service in the background: claim sightings,
# failed sign-ins (the throttle), refused actions in the audit trail, a session's last use.
_UNTRACKED = {"ops_workers", "ops_ui_login_failures"}
_ROW = {
    "ops_audit": "(to_jsonb(t)) FROM ops_audit t WHERE outcome <> 'refused'",
    "ops_ui_sessions": "(to_jsonb(t) - 'last_seen_at') FROM ops_ui_sessions t",
}


async def fingerprint_query(db: asyncpg.Connection) -> str:
    tables = [
        row["table_name"]
        for row in await db.fetch(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
        if row["table_name"] not in _UNTRACKED
    ]
    parts = [
        f"SELECT '{table}:' || {_ROW.get(table, f'(to_jsonb(t)) FROM {table} t')}".replace(
            " FROM", "::text AS row FROM", 1
        )
        for table in tables
    ]
    return (
        "SELECT md5(coalesce(string_agg(row, '|' ORDER BY row), '')) FROM ("
        + " UNION ALL ".join(parts)
        + ") rows"
    )


# -- the walk ------------------------------------------------------------------------------


@dataclass
class Walker:
    http: httpx.AsyncClient
    db: asyncpg.Connection
    fingerprint_sql: str
    run_id: str
    cookie: str = ""
    csrf: str = ""
    counts: Counter[int] = field(default_factory=Counter)
    by_route: dict[str, Counter[int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    sent: int = 0

    async def sign_in(self) -> None:
        self.cookie = await signed_in(self.http)
        page = await self.http.get("/ops/ui/runs", headers=self._session())
        assert page.status_code == 200, page.text
        self.csrf = csrf_in(page.text)

    def _session(self) -> dict[str, str]:
        return {"cookie": f"ops_session={self.cookie}"}

    async def fingerprint(self) -> str:
        value: str = await self.db.fetchval(self.fingerprint_sql)
        return value

    # the valid request an edge goes into

    def path_values(self, route: Route) -> dict[str, str]:
        values = {}
        for name in re.findall(r"{(\w+)}", route.path):
            if name == "automation_id":
                # fire starts a Temporal workflow for an automation that exists
                values[name] = (
                    MISSING_AUTOMATION if route.path.endswith("/fire") else "test-activity"
                )
            else:
                values[name] = self.run_id
        return values

    def headers(self, route: Route) -> dict[str, str | bytes]:
        headers: dict[str, str | bytes] = {}
        if route.credential is Credential.worker:
            headers["authorization"] = f"Bearer {WORKER_TOKEN}"
        elif route.credential is not None:
            headers["authorization"] = f"Bearer {OPERATOR_TOKEN}"
        if route.ui:
            headers["cookie"] = f"ops_session={self.cookie}"
            if route.method == "POST":
                headers["origin"] = ORIGIN
                headers["content-type"] = "application/x-www-form-urlencoded"
        elif route.method == "POST":
            headers["content-type"] = "application/json"
        return headers

    def form(self, route: Route) -> dict[str, str]:
        fields = {"csrf_token": self.csrf}
        if route.path == "/ops/ui/login":
            return {"name": "operator", "token": OPERATOR_TOKEN, "next": "/ops/ui/runs"}
        if route.path.endswith("/cancel"):
            fields["reason"] = "edge walk"
        if route.path == "/ops/ui/dead-letter/requeue":
            fields["run_id"] = self.run_id
        return fields

    def body(self, route: Route) -> Any:
        if route.path == "/ops-runs/claim":
            return {"worker_id": WORKER_ID, "labels": ["edge-walk-matches-nothing"]}
        if route.path.endswith("/heartbeat"):
            return {"worker_id": WORKER_ID}
        if route.path.endswith("/complete"):
            return {"worker_id": WORKER_ID, "result": {"ok": True}}
        if route.path.endswith("/fail"):
            return {"worker_id": WORKER_ID, "error": "edge walk", "reopen": True}
        if route.path.endswith("/cancel"):
            return {"reason": "edge walk"}
        if route.path == "/ops-runs/requeue":
            return {"run_ids": [self.run_id]}
        return None

    async def send(self, route: Route, param: Param | None, value: str | bytes | None) -> None:
        paths = self.path_values(route)
        query: list[tuple[str, str]] = []
        headers = self.headers(route)
        form = self.form(route) if route.ui and route.method == "POST" else None
        body = None if route.ui else self.body(route)
        if param is not None:
            assert value is not None
            if param.where == "path":
                assert isinstance(value, str)
                paths[param.name] = value
            elif param.where == "query":
                assert isinstance(value, str)
                query.append((param.name, value))
            elif param.where == "form":
                assert form is not None and isinstance(value, str)
                form[param.name] = value
                if param.name == "automation":
                    form["matching"] = "1"
            else:
                headers[param.name] = value
                if param.name == "authorization":
                    # the edge is the only credential
                    headers.pop("x-worker-token", None)
        url = route.path
        for name, text in paths.items():
            url = url.replace("{" + name + "}", _encoded(text))
        if query:
            url += "?" + "&".join(f"{_encoded(k)}={_encoded(v)}" for k, v in query)
        content: bytes | None = None
        if form is not None:
            content = "&".join(f"{_encoded(k)}={_encoded(v)}" for k, v in form.items()).encode()
        elif body is not None:
            content = json.dumps(body).encode()
        what = f"{param.where} {param.name}" if param is not None else "baseline"
        request = f"{route} {url[:160]!r} {what}={value!r:.80}"
        before = await self.fingerprint()
        try:
            response = await self.http.request(
                route.method, url, content=content, headers=_header_list(headers)
            )
        except Exception as exc:  # the app raised through the transport: a 500
            self.count(route, 500)
            self.problems.append(f"{request}: raised {type(exc).__name__}: {exc}"[:400])
            return
        self.sent += 1
        self.count(route, response.status_code)
        problem = self.check(route, response)
        refused = 400 <= response.status_code < 500
        if problem is None and refused and await self.fingerprint() != before:
            problem = "a refused request changed the database"
        if problem is not None:
            self.problems.append(f"{request}: {response.status_code} {problem}"[:400])
        if route.path == "/ops/ui/logout" and response.status_code == 303:
            await self.sign_in()  # that request signed the walker out

    def count(self, route: Route, status: int) -> None:
        self.counts[status] += 1
        self.by_route.setdefault(str(route), Counter())[status] += 1

    @staticmethod
    def check(route: Route, response: httpx.Response) -> str | None:
        status = response.status_code
        if status >= 500:
            return f"a 5xx: {response.text[:200]}"
        if status < 400:
            return None
        content_type = response.headers.get("content-type", "")
        if route.ui:
            if not content_type.startswith("text/html"):
                return f"a UI refusal that is not a page: {content_type} {response.text[:200]}"
            found = re.search(r'data-field="code">([a-z_]+)<', response.text)
            if found is not None and found.group(1) in {c.value for c in RefusalCode}:
                return None
            if route.path == "/ops/ui/login" and status == 401 and "csrf" not in response.text:
                return None  # the sign-in form again, saying it failed
            return f"a UI refusal page without a refusal code: {response.text[:200]}"
        try:
            body = ErrorBody.model_validate_json(response.content)
        except ValueError:
            return f"not an ErrorBody: {response.text[:200]}"
        if body.code is RefusalCode.invalid_request and not body.errors:
            return "an invalid_request that names no field"
        return None


def _encoded(value: str) -> str:
    if isinstance(value, Raw):
        return str(value)
    return urllib.parse.quote(value, safe="", errors="surrogatepass")


def _header_list(headers: dict[str, str | bytes]) -> list[tuple[bytes, bytes]]:
    def raw(value: str | bytes) -> bytes:
        if isinstance(value, bytes):
            return value
        try:
            return value.encode("latin-1")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")

    return [(name.encode(), raw(value)) for name, value in headers.items()]


def _values(param: Param, route_index: int) -> list[str | bytes]:
    if param.kind == "header":
        start = (route_index * HEADER_EDGES_PER_ROUTE) % len(HEADER_VALUES)
        rotated = (HEADER_VALUES * 2)[start : start + HEADER_EDGES_PER_ROUTE]
        return [*rotated, *sample(header_values(), 1)]
    named, strategy = KINDS[param.kind]
    return [*named, *sample(strategy(), GENERATED)]


@pytest.fixture
async def walker(
    api: AppClient, seeded: SeededQueue, db: asyncpg.Connection
) -> AsyncIterator[Walker]:
    await seeded.runs(3)
    await seeded.run(state="failed")
    run_id = await seeded.run(
        state="claimed",
        claim_owner=WORKER_ID,
        lease_until=datetime.now(UTC) + timedelta(hours=1),
        attempt=1,
    )
    # the app's own answer to an exception no handler takes is a 500 here, not a raise
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app, raise_app_exceptions=False),
        base_url="http://activity-core.test",
    )
    walker = Walker(http, db, await fingerprint_query(db), str(run_id))
    await walker.sign_in()
    try:
        yield walker
    finally:
        await http.aclose()


@pytest.mark.timeout(300)
async def test_no_edge_value_in_any_parameter_gets_a_5xx_or_an_undocumented_refusal(
    walker: Walker,
) -> None:
    for index, route in enumerate(ROUTES):
        await walker.send(route, None, None)
        for param in route.params:
            for value in _values(param, index):
                await walker.send(route, param, value)
    table = "\n".join(
        f"  {route}: {dict(sorted(counts.items()))}"
        for route, counts in sorted(walker.by_route.items())
    )
    summary = f"{walker.sent} requests, by status {dict(sorted(walker.counts.items()))}\n{table}"
    print(summary)
    assert not walker.problems, (
        f"{len(walker.problems)} requests broke a rule:\n"
        + "\n".join(walker.problems[:40])
        + f"\n{summary}"
    )
    # the walk reached past the edge: some requests were taken, some refused
    assert walker.counts[200] > 0 and walker.counts[422] > 0, summary
    assert set(walker.by_route) == {str(r) for r in ROUTES}
