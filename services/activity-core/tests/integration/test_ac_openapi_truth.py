"""The OpenAPI document says what the app does.

A walk drives real requests at every operation the document lists (named by its
operationId), against a migrated database, a database that cannot be reached and one
that was never migrated, and records every answer. Then:

- every status an operation answered is one its `responses` document, and every error
  status it documents was answered by some request of the walk (or is named in
  NEEDS_TEMPORAL: a success only a running Temporal server gives);
- every error body is an `ErrorBody` whose `code` is a `RefusalCode` answered with that
  code's status in `REFUSAL_HTTP_STATUS` (what rein-aharness relies on);
- every `RefusalCode` member was answered by some request (the JSON API's, or the ops
  UI's error pages for the codes only the UI sends), is in RESERVED with the reason no
  request can produce it, or in SERVER_ONLY (the HTTP server's own, before the app).

The other tests here hold the document's operation ids, security and docs pages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi.routing import APIRoute

from ac_changes import ChangedRuns, completion, make_changes, store
from ac_definitions import GRANT
from ac_fires import SeededAutomations
from ac_routers import JSON_ROUTERS
from ac_testkit import (
    OPERATOR_TOKEN,
    WORKER_ID,
    WORKER_TOKEN,
    AppClient,
    SeededQueue,
    running_app,
    settings_env,
)
from activity_core.http.app import create_app
from activity_core.http.credentials import Credential, credential_of
from activity_core.settings import load_settings
from activity_core.temporal.dev_server import free_port
from ops_contracts import REFUSAL_HTTP_STATUS, ErrorBody, RefusalCode

VIEWER_TOKEN = "viewer-token-0123456789abcdef"
UNKNOWN_TOKEN = "not-a-configured-token-0123456789"
OTHER_WORKER = "rein-aharness@other02"
MAX_BODY_BYTES = 4096
UNREACHABLE_DSN = "postgresql://nobody@127.0.0.1:1/none"

# The operation ids clients generate code from: readable, and changed only on purpose.
OPERATION_IDS = {
    ("get", "/ops-runs"): "listRuns",
    ("post", "/ops-runs/claim"): "claimRuns",
    ("post", "/ops-runs/expire-leases"): "expireLeases",
    ("get", "/ops-runs/{run_id}"): "getRun",
    ("post", "/ops-runs/{run_id}/heartbeat"): "heartbeatRun",
    ("post", "/ops-runs/{run_id}/complete"): "completeRun",
    ("post", "/ops-runs/{run_id}/fail"): "failRun",
    ("put", "/ops-runs/{run_id}/changes"): "uploadChanges",
    ("post", "/ops-runs/requeue"): "requeueRuns",
    ("post", "/ops-runs/{run_id}/requeue"): "requeueRun",
    ("post", "/ops-runs/{run_id}/cancel"): "cancelRun",
    ("post", "/ops-runs/{run_id}/publish"): "publishRun",
    ("get", "/ops-runs/{run_id}/explain"): "explainRun",
    ("get", "/ops-runs/{run_id}/changes"): "getRunChanges",
    ("get", "/ops-runs/{run_id}/changes.patch"): "getRunChangesPatch",
    ("get", "/ops-runs/{run_id}/changes.bundle"): "getRunChangesBundle",
    ("get", "/ops/runs/summary"): "getRunsSummary",
    ("get", "/ops/runs/dead-letter"): "listDeadLetterRuns",
    ("get", "/ops/workers"): "listWorkers",
    ("get", "/ops/audit"): "listAuditEntries",
    ("get", "/ops/automations"): "listAutomations",
    ("get", "/ops/automations/{automation_id}/runs"): "listAutomationFires",
    ("get", "/ops/automations/{automation_id}/runs/{run_id}"): "getAutomationFire",
    ("post", "/ops/automations/{automation_id}/fire"): "fireAutomation",
    ("get", "/ops/automations/{automation_id}"): "getAutomation",
    ("post", "/ops/automations/{automation_id}/pause"): "pauseAutomation",
    ("post", "/ops/automations/{automation_id}/resume"): "resumeAutomation",
    ("get", "/healthz"): "getHealth",
    ("get", "/readyz"): "getReadiness",
}

# What each kind of credential a route declares requires: a token as a bearer token or in
# its own header; an action (OPERATOR_CREDENTIAL) names the role it needs.
SECURITY = {
    Credential.worker: [{"workerBearer": []}, {"workerToken": []}],
    Credential.viewer: [{"operatorBearer": []}, {"operatorToken": []}],
    Credential.operator: [{"operatorBearer": ["operator"]}, {"operatorToken": ["operator"]}],
}

# Documented statuses the walk cannot produce without a running Temporal server; the
# tests under tests/integration/temporal/ produce them against a dev server.
NEEDS_TEMPORAL = {
    "fireAutomation": {"202"},
    # a start (202) and a repeat of a pending or published one (200):
    # temporal/test_ac_publication_workflow.py
    "publishRun": {"200", "202"},
    "pauseAutomation": {"200"},
    "resumeAutomation": {"200"},
}

# Codes no request is meant to produce, and why.
RESERVED = {
    "internal_error": "the answer to an unexpected failure (a bug), never planned",
    "http_error": "the framework's own 400 for a body it cannot parse: the body "
    "guard refuses every such body (415, 422) before the framework reads it",
}
# Answered by the HTTP server itself before the app has a request (bounded_requests.py),
# so a walk through the app cannot produce them; test_ac_bounded_requests.py does, over a
# socket. Like a malformed request line's 400, no operation documents them.
SERVER_ONLY = {
    "headers_too_large": "a request line and headers over 64 KiB",
    "request_timeout": "a request that did not arrive whole in time",
}
# A JSON media type whose parameter names a form: the body guard must not take it for one.
FORM_LIKE_JSON = "application/json; x=application/x-www-form-urlencoded"

_HTML_CODE = re.compile(r"<code[^>]*>([a-z_]+)</code>")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


WORKER = bearer(WORKER_TOKEN)
OPERATOR = bearer(OPERATOR_TOKEN)
VIEWER = bearer(VIEWER_TOKEN)
HEADER_CREDENTIAL = {
    Credential.worker: {"X-Worker-Token": WORKER_TOKEN},
    Credential.viewer: {"X-Operator-Token": OPERATOR_TOKEN},
    Credential.operator: {"X-Operator-Token": OPERATOR_TOKEN},
}
BEARER_CREDENTIAL = {
    Credential.worker: WORKER,
    Credential.viewer: OPERATOR,
    Credential.operator: OPERATOR,
}


def document_of_a_fresh_app() -> dict[str, Any]:
    # create_app touches no database until its lifespan starts
    app = create_app(load_settings(**settings_env()), dsn=UNREACHABLE_DSN)
    document: dict[str, Any] = app.openapi()
    return document


def operations(document: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """operationId -> (method, path template, the operation)."""
    return {
        op["operationId"]: (method, path, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
    }


# -- the document's own shape ---------------------------------------------------------------


def test_operation_ids_are_readable_stable_and_unique() -> None:
    document = document_of_a_fresh_app()
    found = {
        (method, path): op["operationId"]
        for path, item in document["paths"].items()
        for method, op in item.items()
    }
    assert found == OPERATION_IDS
    assert len(set(found.values())) == len(found)
    for operation_id in found.values():
        assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", operation_id), operation_id


def test_each_operation_requires_the_credential_its_route_declares() -> None:
    document = document_of_a_fresh_app()
    schemes = document["components"]["securitySchemes"]
    assert {
        name: {k: v for k, v in scheme.items() if k != "description"}
        for name, scheme in schemes.items()
    } == {
        "workerBearer": {"type": "http", "scheme": "bearer"},
        "workerToken": {"type": "apiKey", "in": "header", "name": "X-Worker-Token"},
        "operatorBearer": {"type": "http", "scheme": "bearer"},
        "operatorToken": {"type": "apiKey", "in": "header", "name": "X-Operator-Token"},
    }
    assert all(scheme["description"] for scheme in schemes.values())
    declared = {
        (method.lower(), route.path_format): credential_of(route)
        for router in JSON_ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    }
    kinds: dict[Credential | None, int] = {}
    for path, item in document["paths"].items():
        for method, op in item.items():
            kind = declared[(method, path)]
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind is None:
                assert "security" not in op, (method, path)
                assert not {"401", "403"} & set(op["responses"]), (method, path)
                continue
            assert op["security"] == SECURITY[kind], (method, path)
            assert {"401", "403"} <= set(op["responses"]), (method, path)
    # every kind of credential occurs, and only the health endpoints take none
    assert set(kinds) == {None, *Credential}
    assert kinds[None] == 2


def test_every_error_response_is_an_error_body_whose_code_is_the_refusal_enum() -> None:
    document = document_of_a_fresh_app()
    schemas = document["components"]["schemas"]
    assert schemas["ErrorBody"]["properties"]["code"] == {
        "$ref": "#/components/schemas/RefusalCode"
    }
    assert schemas["RefusalCode"]["enum"] == [code.value for code in RefusalCode]
    for operation_id, (_, _, op) in operations(document).items():
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (operation_id, status)


async def test_docs_pages_are_off_and_the_document_is_served(api: AppClient) -> None:
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        response = await api.http.get(path)
        assert response.status_code == 404, path
        assert response.json()["code"] == "not_found"
    served = await api.http.get("/openapi.json")
    assert served.status_code == 200
    assert served.json() == api.app.openapi()


# -- the walk -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    operation: str | None  # the operationId; None for a request no operation takes
    probe: str
    status: int
    code: str | None
    body: Any


@dataclass
class Walk:
    document: dict[str, Any]
    answers: list[Answer] = field(default_factory=list)

    def path_of(self, operation: str, params: dict[str, str]) -> tuple[str, str]:
        method, template, _ = operations(self.document)[operation]
        path = template
        for name, value in params.items():
            path = path.replace("{" + name + "}", value)
        assert "{" not in path, (operation, path)
        return method, path

    async def call(
        self,
        http: httpx.AsyncClient,
        operation: str,
        probe: str,
        *,
        params: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
        json_body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        method, path = self.path_of(operation, params or {})
        response = await http.request(
            method.upper(),
            path,
            params=query,
            json=json_body if content is None else None,
            content=content,
            headers=headers or {},
        )
        self.record(operation, probe, response)
        return response

    async def send(
        self,
        http: httpx.AsyncClient,
        operation: str,
        probe: str,
        request: Request,
        headers: dict[str, str],
    ) -> httpx.Response:
        """`call` with `request`: its parameters, query and body, its headers over `headers`."""
        return await self.call(
            http,
            operation,
            probe,
            params=request.params,
            query=request.query,
            json_body=request.json_body,
            content=request.content,
            headers={**headers, **request.headers},
        )

    def record(self, operation: str | None, probe: str, response: httpx.Response) -> None:
        code: str | None = None
        body: Any = None
        media = response.headers.get("content-type", "")
        if media.startswith("application/json"):
            body = response.json()
            if isinstance(body, dict) and response.status_code >= 400:
                code = body.get("code")
        elif media.startswith("text/html") and response.status_code >= 400:
            found = _HTML_CODE.search(response.text)
            code = found.group(1) if found else None
        self.answers.append(Answer(operation, probe, response.status_code, code, body))


@dataclass(frozen=True)
class Request:
    """A request an operation accepts, given the seeded rows (its valid form)."""

    params: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] | None = None
    json_body: Any = None
    # a body that is not JSON (a changes bundle), and the headers that describe it
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class World:
    """The rows the walk's requests refer to, on the migrated database."""

    seeded: SeededQueue
    automations: SeededAutomations
    # where the changes bundles of granted runs are made (a repository each)
    where: Path
    scheduled: str = "walk-scheduled"
    manual: str = "walk-manual"
    paused: str = "walk-paused"
    fire_run_id: str = ""
    # a succeeded run with its changes stored (ac_changes), and one whose bundle git
    # cannot read
    changed: str = ""
    unreadable: str = ""

    async def seed(self) -> None:
        scheduled = await self.automations.automation(
            self.scheduled, cron="0 6 * * 1-5", timezone="UTC"
        )
        await self.automations.automation(self.manual)
        await self.automations.automation(self.paused, paused=True)
        _, self.fire_run_id = await self.automations.fire(
            scheduled, started_at=datetime.now(UTC) - timedelta(hours=1)
        )

    async def run(self, **columns: Any) -> str:
        return str(await self.seeded.run(**columns))

    async def held(self, owner: str = WORKER_ID, *, live: bool = True, **columns: Any) -> str:
        lease = timedelta(hours=1) if live else -timedelta(minutes=5)
        return await self.run(
            state="claimed",
            claim_owner=owner,
            lease_until=datetime.now(UTC) + lease,
            attempt=1,
            **columns,
        )


Valid = Callable[[World], Awaitable[Request]]


async def _nothing(_: World) -> Request:
    return Request()


async def _claim(_: World) -> Request:
    return Request(json_body={"worker_id": WORKER_ID, "limit": 1})


async def _run_read(world: World) -> Request:
    return Request(params={"run_id": await world.run()})


async def _heartbeat(world: World) -> Request:
    return Request(
        params={"run_id": await world.held()},
        json_body={"worker_id": WORKER_ID, "lease_seconds": 600, "attempt": 1},
    )


async def _complete(world: World) -> Request:
    return Request(
        params={"run_id": await world.held()},
        json_body={"worker_id": WORKER_ID, "attempt": 1, "result": {"ok": True}},
    )


async def _fail(world: World) -> Request:
    return Request(
        params={"run_id": await world.held()},
        json_body={"worker_id": WORKER_ID, "attempt": 1, "error": "llm timeout"},
    )


def changes_upload(run_id: str, bundle: bytes, *, attempt: int = 1) -> Request:
    return Request(
        params={"run_id": run_id},
        query={"worker_id": WORKER_ID, "attempt": attempt},
        content=bundle,
        headers={
            "content-type": "application/x-git-bundle",
            "x-changes-digest": "sha256:" + hashlib.sha256(bundle).hexdigest(),
        },
    )


async def _upload_changes(world: World) -> Request:
    run_id = await world.held(repository_grant=GRANT)
    return changes_upload(run_id, make_changes(world.where, run_id).bundle)


async def _requeue_many(world: World) -> Request:
    return Request(json_body={"run_ids": [await world.run(state="failed", attempt=1)]})


async def _requeue(world: World) -> Request:
    return Request(params={"run_id": await world.run(state="failed", attempt=1)})


async def _cancel(world: World) -> Request:
    return Request(params={"run_id": await world.run()}, json_body={"reason": "duplicate"})


async def _publish(world: World) -> Request:
    # a succeeded run without stored changes: 409 (one with changes reaches Temporal)
    return Request(params={"run_id": await world.run(state="succeeded", attempt=1)})


async def _changes_read(world: World) -> Request:
    return Request(params={"run_id": world.changed})


async def _automation(world: World) -> Request:
    return Request(params={"automation_id": world.scheduled})


async def _fire_detail(world: World) -> Request:
    return Request(params={"automation_id": world.scheduled, "run_id": world.fire_run_id})


async def _fire(world: World) -> Request:
    return Request(params={"automation_id": world.scheduled}, json_body={})


async def _pause(world: World) -> Request:
    return Request(params={"automation_id": world.scheduled}, json_body={"reason": "walk"})


# Each operation's valid request. A valid fire, pause or resume reaches Temporal, which the
# walk's apps cannot reach: they answer 503.
VALID: dict[str, Valid] = {
    "listRuns": _nothing,
    "claimRuns": _claim,
    "expireLeases": _nothing,
    "getRun": _run_read,
    "heartbeatRun": _heartbeat,
    "completeRun": _complete,
    "failRun": _fail,
    "uploadChanges": _upload_changes,
    "requeueRuns": _requeue_many,
    "requeueRun": _requeue,
    "cancelRun": _cancel,
    "publishRun": _publish,
    "explainRun": _run_read,
    "getRunChanges": _changes_read,
    "getRunChangesPatch": _changes_read,
    "getRunChangesBundle": _changes_read,
    "getRunsSummary": _nothing,
    "listDeadLetterRuns": _nothing,
    "listWorkers": _nothing,
    "listAuditEntries": _nothing,
    "listAutomations": _nothing,
    "listAutomationFires": _automation,
    "getAutomationFire": _fire_detail,
    "fireAutomation": _fire,
    "getAutomation": _automation,
    "pauseAutomation": _pause,
    "resumeAutomation": _automation,
    "getHealth": _nothing,
    "getReadiness": _nothing,
}


@pytest.fixture
def operators_file(tmp_path: Path) -> Path:
    digest = "sha256:" + hashlib.sha256(VIEWER_TOKEN.encode()).hexdigest()
    path = tmp_path / "operators.json"
    path.write_text(json.dumps({"operators": {"bob": {"token": digest, "role": "viewer"}}}))
    return path


@pytest.fixture
async def walk_apps(
    db_dsn: str, empty_dsn: str, operators_file: Path
) -> AsyncIterator[dict[str, AppClient]]:
    """The app on the migrated database, on one that cannot be reached and on one never
    migrated; Temporal is unreachable for all of them."""
    env: dict[str, Any] = {
        "ACTIVITY_CORE_OPERATORS_FILE": str(operators_file),
        "ACTIVITY_CORE_MAX_BODY_BYTES": MAX_BODY_BYTES,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    async with contextlib.AsyncExitStack() as stack:
        started = [
            await stack.enter_async_context(running_app(dsn, **env))
            for dsn in (db_dsn, UNREACHABLE_DSN, empty_dsn)
        ]
        yield dict(zip(("up", "down", "empty"), started, strict=True))


async def _generic_probes(walk: Walk, world: World, apps: dict[str, AppClient]) -> None:
    """What every operation answers to a missing or wrong credential, a bad or large
    body, a database away or not migrated, and its valid request under each way of
    presenting its credential."""
    up = apps["up"].http
    for operation, (method, _, _) in operations(walk.document).items():
        valid = VALID[operation]
        kind = _credential(walk, operation)
        if kind is None:
            request = await valid(world)
            await walk.call(up, operation, "valid", params=request.params, query=request.query)
        else:
            for style, credentials in (
                ("bearer", BEARER_CREDENTIAL),
                ("header", HEADER_CREDENTIAL),
            ):
                request = await valid(world)
                response = await walk.send(
                    up, operation, f"valid, {style}", request, credentials[kind]
                )
                assert response.status_code not in (401, 403), (operation, style, response.text)
            request = await valid(world)
            if kind is Credential.viewer:
                # a viewer reads
                reading = await walk.call(
                    up,
                    operation,
                    "a viewer's token",
                    params=request.params,
                    query=request.query,
                    headers=VIEWER,
                )
                assert reading.status_code not in (401, 403), (operation, reading.text)
            refused = [("no credential", {}), ("unknown token", bearer(UNKNOWN_TOKEN))]
            if kind is Credential.worker:
                refused += [("an operator's token", OPERATOR), ("a viewer's token", VIEWER)]
            else:
                refused.append(("a worker's token", WORKER))
            if kind is Credential.operator:
                refused.append(("a viewer's token", VIEWER))
            for probe, headers in refused:
                response = await walk.send(up, operation, probe, request, headers)
                assert response.status_code in (401, 403), (operation, probe, response.text)
        headers = BEARER_CREDENTIAL[kind] if kind is not None else {}
        if method == "post":
            request = await valid(world)
            for probe, content, media in (
                ("too large", b"{" + b" " * MAX_BODY_BYTES + b"}", "application/json"),
                ("not JSON", b"{", "application/json"),
                ("not UTF-8", b"\xff\xfe{", "application/json"),
                ("a JSON media type the API does not take", b"{}", "application/merge-patch+json"),
                ("JSON said to be a form-like parameter", b"\xff", FORM_LIKE_JSON),
            ):
                await walk.call(
                    up,
                    operation,
                    probe,
                    params=request.params,
                    content=content,
                    headers={**headers, "content-type": media},
                )
        for app, probe in (("down", "database unreachable"), ("empty", "schema not migrated")):
            request = await valid(world)
            await walk.send(apps[app].http, operation, probe, request, headers)


def _credential(walk: Walk, operation: str) -> Credential | None:
    security = operations(walk.document)[operation][2].get("security")
    if security is None:
        return None
    (kind,) = [kind for kind, requirement in SECURITY.items() if requirement == security]
    return kind


async def _refusal_probes(walk: Walk, world: World, http: httpx.AsyncClient) -> None:
    """The refusals of each operation's own decisions: what is not there, what
    conflicts, what is malformed."""
    gone = str(uuid.uuid4())
    worker = {"worker_id": WORKER_ID, "attempt": 1}

    async def call(operation: str, probe: str, **kwargs: Any) -> httpx.Response:
        kind = _credential(walk, operation)
        headers = kwargs.pop("headers", BEARER_CREDENTIAL[kind] if kind else {})
        return await walk.call(http, operation, probe, headers=headers, **kwargs)

    # reads
    await call("listRuns", "no such automation", query={"automation": "no-such"})
    await call("listRuns", "limit 0", query={"limit": 0})
    for operation in ("getRunChanges", "getRunChangesPatch", "getRunChangesBundle"):
        await call(operation, "no such run", params={"run_id": gone})
        await call(operation, "no changes stored", params={"run_id": await world.run()})
        await call(operation, "not a UUID", params={"run_id": "not-a-uuid"})
    for operation in ("getRunChanges", "getRunChangesPatch"):
        await call(operation, "a bundle git cannot read", params={"run_id": world.unreadable})
    for operation in ("getRun", "explainRun"):
        await call(operation, "no such run", params={"run_id": gone})
        await call(operation, "not a UUID", params={"run_id": "not-a-uuid"})
    await call("getRunsSummary", "since is no time", query={"since": "yesterday"})
    await call("listDeadLetterRuns", "no such automation", query={"automation": "no-such"})
    await call("listDeadLetterRuns", "limit 0", query={"limit": 0})
    await call("listAuditEntries", "a cursor that is no cursor", query={"cursor": "abc"})
    await call("listAutomationFires", "no such automation", params={"automation_id": "no-such"})
    await call(
        "listAutomationFires",
        "limit 0",
        params={"automation_id": world.scheduled},
        query={"limit": 0},
    )
    await call(
        "getAutomationFire",
        "no such fire",
        params={"automation_id": world.scheduled, "run_id": "no-such"},
    )
    await call(
        "getAutomationFire",
        "a fire id over 200 characters",
        params={"automation_id": world.scheduled, "run_id": "r" * 201},
    )
    await call("getAutomation", "no such automation", params={"automation_id": "no-such"})
    await call("getAutomation", "a slug with a space", params={"automation_id": "a b"})
    await call("getAutomation", "manual only", params={"automation_id": world.manual})

    # the worker's operations
    await call("claimRuns", "another worker's id", json_body={"worker_id": OTHER_WORKER})
    await call("claimRuns", "limit 0", json_body={"worker_id": WORKER_ID, "limit": 0})
    closes = {
        "heartbeatRun": {**worker, "lease_seconds": 600},
        "completeRun": {**worker, "result": {"ok": True}},
        "failRun": {**worker, "error": "llm timeout"},
    }
    for operation, body in closes.items():
        await call(operation, "no such run", params={"run_id": gone}, json_body=body)
        await call(operation, "not a UUID", params={"run_id": "not-a-uuid"}, json_body=body)
        await call(
            operation,
            "no worker_id",
            params={"run_id": await world.held()},
            json_body={k: v for k, v in body.items() if k != "worker_id"},
        )
        await call(
            operation,
            "another worker's id",
            params={"run_id": await world.held()},
            json_body={**body, "worker_id": OTHER_WORKER},
        )
        await call(operation, "an open run", params={"run_id": await world.run()}, json_body=body)
        await call(
            operation,
            "held by another worker",
            params={"run_id": await world.held(OTHER_WORKER)},
            json_body=body,
        )
        await call(
            operation,
            "its lease ended",
            params={"run_id": await world.held(live=False)},
            json_body=body,
        )
        await call(
            operation,
            "a later attempt",
            params={"run_id": await world.held()},
            json_body={**body, "attempt": 2},
        )
    for operation, body in (("completeRun", closes["completeRun"]), ("failRun", closes["failRun"])):
        legacy = await world.run(
            state="succeeded", claim_owner=WORKER_ID, attempt=1, result={"ok": True}
        )
        await call(operation, "a terminal run", params={"run_id": legacy}, json_body=body)
        granted = await world.held(repository_grant=GRANT)
        await call(
            operation,
            "no grant evidence",
            params={"run_id": granted},
            json_body={
                **body,
                "result": {
                    "ok": True,
                    "repository_transaction": {"grant_id": "rg1-not-this-grant"},
                },
            },
        )
    closed = await world.held()
    await call("completeRun", "closed", params={"run_id": closed}, json_body=closes["completeRun"])
    await call(
        "completeRun",
        "the same close again",
        params={"run_id": closed},
        json_body=closes["completeRun"],
    )
    await call(
        "completeRun",
        "a different close",
        params={"run_id": closed},
        json_body={**closes["completeRun"], "result": {"ok": False}},
    )

    # the changes upload (docs/changes.md) and the close that needs it
    async def upload(probe: str, request: Request, **overrides: Any) -> httpx.Response:
        return await call(
            "uploadChanges",
            probe,
            params=overrides.pop("params", request.params),
            query=overrides.pop("query", request.query),
            content=overrides.pop("content", request.content),
            headers={**BEARER_CREDENTIAL[Credential.worker], **request.headers, **overrides},
        )

    valid = await _upload_changes(world)
    await upload("no such run", valid, params={"run_id": gone})
    await upload("not a UUID", valid, params={"run_id": "not-a-uuid"})
    await upload("no worker_id", valid, query={"attempt": 1})
    await upload("attempt 0", valid, query={"worker_id": WORKER_ID, "attempt": 0})
    await upload("another worker's id", valid, query={"worker_id": OTHER_WORKER, "attempt": 1})
    await upload("not a bundle's media type", valid, **{"content-type": "application/json"})
    await upload("a digest that is not the body's", valid, **{"x-changes-digest": "sha256:0"})
    await upload("a body over the bound", valid, content=b"\0" * (8 * 1_048_576 + 1))
    await upload("garbage", valid, content=b"not a bundle", **{"x-changes-digest": "x"})
    await upload("stored", valid)
    await upload("the same bundle again", valid)
    other_run = await world.held(repository_grant=GRANT)
    other = make_changes(
        world.where / "other", valid.params["run_id"], commits=[{"briefs/o.md": "o"}]
    )
    await upload(
        "another bundle for the attempt", changes_upload(valid.params["run_id"], other.bundle)
    )
    for probe, run_id in (
        ("an open run", await world.run(repository_grant=GRANT)),
        ("held by another worker", await world.held(OTHER_WORKER, repository_grant=GRANT)),
        ("its lease ended", await world.held(live=False, repository_grant=GRANT)),
        ("a run without a grant", await world.held()),
        (
            "a terminal run",
            await world.run(
                state="failed", claim_owner=WORKER_ID, attempt=1, repository_grant=GRANT
            ),
        ),
    ):
        await upload(probe, changes_upload(run_id, make_changes(world.where, run_id).bundle))
    later = make_changes(world.where / "later", other_run, attempt=2)
    await upload("a later attempt", changes_upload(other_run, later.bundle, attempt=2))
    unstored = await world.held(repository_grant=GRANT)
    await call(
        "completeRun",
        "a granted complete before its changes are stored",
        params={"run_id": unstored},
        json_body={
            **worker,
            "result": completion(GRANT, make_changes(world.where / "unstored", unstored)),
        },
    )

    # the operator's actions
    await call("expireLeases", "an unknown field", json_body={"all": True})
    await call("requeueRuns", "no run ids", json_body={"run_ids": []})
    await call("requeueRuns", "some runs", json_body={"run_ids": [gone, await world.run()]})
    failed = await world.run(state="failed", attempt=1)
    again = {"Idempotency-Key": "walk-1", **OPERATOR}
    await call("requeueRun", "a failed run", params={"run_id": failed}, headers=again)
    await call("requeueRun", "the same key again", params={"run_id": failed}, headers=again)
    await call("requeueRun", "no such run", params={"run_id": gone})
    await call("requeueRun", "an open run", params={"run_id": await world.run()})
    await call(
        "requeueRun",
        "a bad Idempotency-Key",
        params={"run_id": failed},
        headers={"Idempotency-Key": "a key with spaces", **OPERATOR},
    )
    await call("cancelRun", "no such run", params={"run_id": gone}, json_body={"reason": "x"})
    await call("cancelRun", "a terminal run", params={"run_id": failed}, json_body={"reason": "x"})
    await call(
        "cancelRun",
        "a blank reason",
        params={"run_id": await world.run()},
        json_body={"reason": " "},
    )
    await call("publishRun", "no such run", params={"run_id": gone})
    await call("publishRun", "an open run", params={"run_id": await world.run()})
    await call("publishRun", "not a uuid", params={"run_id": "not-a-uuid"})
    await call(
        "fireAutomation", "no such automation", params={"automation_id": "no-such"}, json_body={}
    )
    await call(
        "fireAutomation",
        "a paused automation",
        params={"automation_id": world.paused},
        json_body={},
    )
    await call(
        "fireAutomation",
        "an unknown field",
        params={"automation_id": world.scheduled},
        json_body={"topic": "x"},
    )
    for operation in ("pauseAutomation", "resumeAutomation"):
        await call(operation, "no such automation", params={"automation_id": "no-such"})
        await call(operation, "manual only", params={"automation_id": world.manual})
        await call(operation, "a slug with a space", params={"automation_id": "a b"})
    await call(
        "pauseAutomation",
        "a blank reason",
        params={"automation_id": world.scheduled},
        json_body={"reason": " "},
    )


async def _requests_no_operation_takes(walk: Walk, http: httpx.AsyncClient) -> None:
    walk.record(None, "no route", await http.get("/nowhere", headers=OPERATOR))
    walk.record(
        None, "a method no route takes", await http.delete("/ops-runs/claim", headers=WORKER)
    )
    # the ops UI's own refusals (HTML pages that carry the code)
    walk.record(
        None,
        "ops UI: a sign-in that is not a form",
        await http.post("/ops/ui/login", json={"name": "operator", "token": OPERATOR_TOKEN}),
    )
    form = {"content-type": "application/x-www-form-urlencoded"}
    for attempt in range(30):
        response = await http.post(
            "/ops/ui/login", content=f"name=walker&token=wrong-{attempt}", headers=form
        )
        if response.status_code == 429:
            walk.record(None, "ops UI: sign-ins after many failures", response)
            break


async def _seed_changes(world: World, db: asyncpg.Connection, root: Path) -> None:
    changed = await ChangedRuns(db, root).changed([({"notes/a.md": "a\n"}, "walk")])
    world.changed = str(changed.run_id)
    unreadable = await world.run(state="succeeded", attempt=1, result={"ok": True})
    cut = changed.bundle[: changed.bundle.index(b"\n\n") + 2] + b"PACK" + b"\x00" * 40
    await store(
        db, uuid.UUID(unreadable), 1, cut, changed.baseline, changed.head_after, changed.commits
    )
    world.unreadable = unreadable


async def test_the_walk_answers_only_documented_statuses_and_enumerated_codes(
    walk_apps: dict[str, AppClient], db: asyncpg.Connection, tmp_path: Path
) -> None:
    document = walk_apps["up"].app.openapi()
    assert set(VALID) == set(operations(document))
    world = World(SeededQueue(db), SeededAutomations(db), tmp_path / "changes")
    await world.seed()
    await _seed_changes(world, db, tmp_path)
    walk = Walk(document)
    await _generic_probes(walk, world, walk_apps)
    await _refusal_probes(walk, world, walk_apps["up"].http)
    await _requests_no_operation_takes(walk, walk_apps["up"].http)

    undocumented = []
    answered: dict[str, set[str]] = {operation: set() for operation in operations(document)}
    for answer in walk.answers:
        if answer.operation is None:
            continue
        answered[answer.operation].add(str(answer.status))
        responses = operations(document)[answer.operation][2]["responses"]
        if str(answer.status) not in responses:
            undocumented.append(answer)
    assert undocumented == [], "answered, not documented"

    # nothing documented that no request gives
    for operation, (_, _, op) in operations(document).items():
        missing = set(op["responses"]) - answered[operation] - NEEDS_TEMPORAL.get(operation, set())
        assert missing == set(), (operation, "documented, never answered", missing)

    bad_bodies = []
    codes: set[str] = set()
    for answer in walk.answers:
        if answer.status < 400:
            continue
        if answer.body is not None:
            try:
                ErrorBody.model_validate(answer.body)
            except ValueError:
                bad_bodies.append(answer)
                continue
        if answer.code is None or answer.code not in RefusalCode.__members__:
            bad_bodies.append(answer)
            continue
        if REFUSAL_HTTP_STATUS[RefusalCode(answer.code)] != answer.status:
            bad_bodies.append(answer)
            continue
        codes.add(answer.code)
    assert bad_bodies == [], "not an ErrorBody with a RefusalCode answered with its status"

    enumerated = {code.value for code in RefusalCode}
    assert set(RESERVED) <= enumerated
    assert set(SERVER_ONLY) <= enumerated
    unproduced = enumerated - codes - set(RESERVED) - set(SERVER_ONLY)
    assert unproduced == set(), "codes no request of the walk produced"
    assert not codes & set(RESERVED), "a reserved code was answered"
