"""Named operators and viewers (ACTIVITY_CORE_OPERATORS_FILE) beside the operator token:
who may read, who may act, and the audit trail that names them, refusals included."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ac_testkit import OPERATOR_TOKEN, WORKER_ID, AppClient, SeededQueue
from ac_ui import cookie_of, login, session
from activity_core import cli

ALICE = "alice-token-0123456789abcdef"  # an operator
BOB = "bob-token-0123456789abcdef"  # a viewer


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def operators_file(path: Path, operators: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"operators": operators}), encoding="utf-8")
    return path


@pytest.fixture
def named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = operators_file(
        tmp_path / "operators.json",
        {
            "alice": {"token": digest(ALICE), "role": "operator"},
            "bob": {"token": digest(BOB), "role": "viewer"},
        },
    )
    monkeypatch.setenv("ACTIVITY_CORE_OPERATORS_FILE", str(path))
    return path


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def snapshot(db: asyncpg.Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM ops_runs ORDER BY id")]


async def audit(api: AppClient, **params: str) -> list[dict[str, Any]]:
    response = await api.http.get("/ops/audit", params=params, headers=api.operator_headers())
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = response.json()["entries"]
    return entries


async def test_a_named_operator_acts_under_its_own_name(
    named: Path, app_factory: Any, seeded: SeededQueue
) -> None:
    api: AppClient = await app_factory()
    run = await seeded.run()
    response = await api.http.post(
        f"/ops-runs/{run}/cancel", json={"reason": "duplicate"}, headers=bearer(ALICE)
    )
    assert response.status_code == 200, response.text
    assert response.json()["cancelled_by"] == "alice"
    assert response.json()["last_error"].startswith("cancelled by operator alice ")
    (entry,) = await audit(api, run_id=str(run))
    assert (entry["actor"], entry["role"], entry["action"], entry["outcome"]) == (
        "alice",
        "operator",
        "cancel",
        "applied",
    )
    # ACTIVITY_CORE_OPERATOR_TOKEN stays valid, as the operator named `operator`
    failed = await seeded.run(state="failed", claim_owner=WORKER_ID, attempt=1)
    requeued = await api.http.post(f"/ops-runs/{failed}/requeue", headers=api.operator_headers())
    assert requeued.status_code == 201
    assert [e["actor"] for e in await audit(api, run_id=str(failed))] == ["operator"]


VIEWER_READS = [
    "/ops-runs",
    "/ops-runs?state=failed&worker=w&automation=test-activity",
    "/ops-runs/{run}",
    "/ops-runs/{run}/explain",
    "/ops/runs/summary",
    "/ops/runs/dead-letter",
    "/ops/workers",
    "/ops/audit",
    "/ops/automations",
    "/ops/automations/test-activity/runs",
]


async def test_a_viewer_reads_everything(
    named: Path, app_factory: Any, seeded: SeededQueue
) -> None:
    api: AppClient = await app_factory()
    run = await seeded.run(state="failed", claim_owner=WORKER_ID, attempt=1)
    for path in VIEWER_READS:
        response = await api.http.get(path.format(run=run), headers=bearer(BOB))
        assert response.status_code == 200, (path, response.text)
        also = await api.http.get(path.format(run=run), headers={"X-Operator-Token": BOB})
        assert also.status_code == 200, (path, also.text)


async def test_a_viewer_acts_on_nothing_and_every_attempt_is_audited(
    named: Path, app_factory: Any, seeded: SeededQueue, db: asyncpg.Connection
) -> None:
    api: AppClient = await app_factory()
    failed = await seeded.run(state="failed", claim_owner=WORKER_ID, attempt=1)
    claimed = await seeded.claimed(timedelta(minutes=-1))
    before = await snapshot(db)
    attempts = [
        ("POST", f"/ops-runs/{failed}/requeue", None, "requeue", f"ops_run:{failed}"),
        ("POST", "/ops-runs/requeue", {"run_ids": [str(failed)]}, "requeue", "queue"),
        ("POST", f"/ops-runs/{claimed}/cancel", {"reason": "x"}, "cancel", f"ops_run:{claimed}"),
        ("POST", "/ops-runs/expire-leases", None, "expire-leases", "queue"),
        ("POST", "/ops/automations/test-activity/fire", {}, "fire", "automation:test-activity"),
        # the credential comes before the body: a bad body is still the viewer's 403
        ("POST", f"/ops-runs/{claimed}/cancel", {"reason": ""}, "cancel", f"ops_run:{claimed}"),
    ]
    for method, path, body, _, _ in attempts:
        response = await api.http.request(
            method, path, json=body, headers={**bearer(BOB), "X-Request-Id": "bob-1"}
        )
        assert response.status_code == 403, (path, response.text)
        assert response.json() == {
            "code": "forbidden",
            "detail": "bob is a viewer: viewers read, only operators act",
        }
        assert response.headers["X-Request-Id"] == "bob-1"
    assert await snapshot(db) == before

    entries = list(reversed(await audit(api, actor="bob")))
    assert [(e["action"], e["target"]) for e in entries] == [(a[3], a[4]) for a in attempts]
    assert {(e["role"], e["outcome"], e["code"], e["request_id"]) for e in entries} == {
        ("viewer", "refused", "forbidden", "bob-1")
    }


async def test_anyone_else_is_refused_at_the_door_and_not_attributed(
    named: Path, app_factory: Any, seeded: SeededQueue
) -> None:
    api: AppClient = await app_factory()
    run = await seeded.run(state="failed", claim_owner=WORKER_ID, attempt=1)
    for headers, status, code in [
        ({}, 401, "unauthenticated"),
        (bearer("not-a-configured-token-0123456789"), 401, "unauthenticated"),
        (api.worker_headers(), 403, "forbidden"),
    ]:
        for path in (f"/ops-runs/{run}/requeue", f"/ops-runs/{run}/cancel"):
            response = await api.http.post(path, json={"reason": "x"}, headers=headers)
            assert (response.status_code, response.json()["code"]) == (status, code), path
        read = await api.http.get("/ops/runs/summary", headers=headers)
        assert (read.status_code, read.json()["code"]) == (status, code)
    assert await audit(api) == []
    # an operator-plane credential never acts as a worker
    for token in (ALICE, BOB):
        claim = await api.http.post(
            "/ops-runs/claim", json={"worker_id": WORKER_ID}, headers=bearer(token)
        )
        assert claim.status_code == 403


async def test_only_the_operators_file_configures_the_operator_plane(
    named: Path, app_factory: Any
) -> None:
    api: AppClient = await app_factory(ACTIVITY_CORE_OPERATOR_TOKEN=None)
    assert (await api.http.get("/ops/workers", headers=bearer(BOB))).status_code == 200
    old = await api.http.get("/ops/workers", headers=bearer(OPERATOR_TOKEN))
    assert old.status_code == 401


async def test_a_viewer_signs_in_to_the_ui_as_itself_and_reads_only(
    named: Path, app_factory: Any
) -> None:
    api: AppClient = await app_factory()
    response = await login(api.http, BOB, "bob")
    assert response.status_code == 303
    page = await api.http.get("/ops/ui/runs", headers=session(cookie_of(response)))
    assert page.status_code == 200
    assert '<span data-field="operator">bob</span> <span class="role">(viewer)</span>' in page.text
    assert "data-action=" not in page.text


async def test_the_open_operator_plane_of_local_development_is_the_anonymous_operator(
    app_factory: Any, seeded: SeededQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTIVITY_CORE_OPERATORS_FILE", raising=False)
    api: AppClient = await app_factory(
        ACTIVITY_CORE_OPERATOR_TOKEN=None, ACTIVITY_CORE_OPS_ALLOW_UNAUTH_MUTATIONS="1"
    )
    run = await seeded.run()
    response = await api.http.post(f"/ops-runs/{run}/cancel", json={"reason": "dev"})
    assert response.status_code == 200, response.text
    assert response.json()["cancelled_by"] == "anonymous"
    entries = (await api.http.get("/ops/audit")).json()["entries"]
    assert [(e["actor"], e["role"]) for e in entries] == [("anonymous", "operator")]


async def test_the_audit_trail_pages_and_filters(api: AppClient, seeded: SeededQueue) -> None:
    runs = [await seeded.run() for _ in range(7)]
    for run in runs:
        await api.http.post(
            f"/ops-runs/{run}/cancel", json={"reason": "bulk stop"}, headers=api.operator_headers()
        )
    pages = await api.pages("/ops/audit", limit="3", action="cancel")
    seen = [e["target"] for page in pages for e in page["entries"]]
    assert seen == [f"ops_run:{run}" for run in reversed(runs)]
    assert await audit(api, action="requeue") == []
    assert await audit(api, run_id=str(runs[0]), target=f"ops_run:{runs[1]}") == []
    for bad in ({"cursor": "x"}, {"limit": "0"}, {"run_id": "nope"}, {"target": ""}):
        response = await api.http.get("/ops/audit", params=bad, headers=api.operator_headers())
        assert response.status_code == 422, bad


async def test_expire_leases_is_audited_with_what_it_did(
    api: AppClient, seeded: SeededQueue
) -> None:
    await seeded.claimed(timedelta(minutes=-1))
    response = await api.http.post("/ops-runs/expire-leases", headers=api.operator_headers())
    assert response.json() == {"reopened": 1, "expired": 0}
    assert response.headers["X-Request-Id"]
    (entry,) = await audit(api, action="expire-leases")
    assert (entry["target"], entry["outcome"], entry["details"]) == (
        "queue",
        "applied",
        {"reopened": 1, "expired": 0},
    )
    assert entry["request_id"] == response.headers["X-Request-Id"]


def test_a_bad_operators_file_stops_serve_with_one_line_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ACTIVITY_CORE_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/never")
    monkeypatch.setenv("ACTIVITY_CORE_OPERATOR_TOKEN", OPERATOR_TOKEN)
    # main() would hand the root logger a handler on pytest's captured stderr, which later
    # tests would find closed
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)
    cases = {
        "missing.json": None,
        "not-json.json": "{",
        "viewer-typo.json": {"bob": {"token": digest(BOB), "role": "reader"}},
        "clash.json": {"operator": {"token": digest(ALICE), "role": "operator"}},
        "twice.json": {
            "a": {"token": digest(ALICE), "role": "operator"},
            "b": {"token": digest(ALICE), "role": "viewer"},
        },
    }
    for name, content in cases.items():
        path = tmp_path / name
        if isinstance(content, str):
            path.write_text(content)
        elif content is not None:
            operators_file(path, content)
        monkeypatch.setenv("ACTIVITY_CORE_OPERATORS_FILE", str(path))
        assert cli.main(["serve", "--port", "0"]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, (name, err)
        assert err[0].startswith("activity-core: ACTIVITY_CORE_OPERATORS_FILE: "), err
