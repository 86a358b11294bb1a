"""/metrics and its scrape credential (ACTIVITY_CORE_METRICS_TOKEN, or its `_FILE`).

Set, /metrics answers only a bearer token equal to it: nothing, a wrong token, a worker's
or an operator's token (in any header they are accepted in elsewhere) is 401
`unauthenticated` in the API's error body; and the metrics token opens nothing else, not
an operator read, a worker's claim or the ops UI's sign-in. Unset, /metrics stays open.
Either way it is not in the OpenAPI document. A real `serve` reads the token from a file
(as from a mounted Secret); a token that is too short, or that is also an operator's or a
worker's token, stops the command with one line naming the variable, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ac_serve import assert_stopped_naming, clean_env, run_cli, serve_env, serve_process
from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, AppClient
from ac_ui import login
from activity_core.http.auth import token_digest

METRICS_TOKEN = "metrics-token-0123456789abcdef"
VARIABLE = "ACTIVITY_CORE_METRICS_TOKEN"
# Nothing listens on port 1: a command that got as far as the database would say so.
UNREACHABLE_URL = "postgresql://nobody@127.0.0.1:1/none"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def assert_unauthenticated(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["code"] == "unauthenticated"
    assert set(response.json()) == {"code", "detail"}


def metric_names(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


@pytest.fixture
async def guarded(app_factory: Any) -> AppClient:
    api: AppClient = await app_factory(ACTIVITY_CORE_METRICS_TOKEN=METRICS_TOKEN)
    return api


async def test_metrics_answer_the_metrics_token_only(guarded: AppClient) -> None:
    http = guarded.http
    allowed = await http.get("/metrics", headers=bearer(METRICS_TOKEN))
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["content-type"].startswith("text/plain")
    assert {"ops_runs", "ops_http_requests"} <= metric_names(allowed.text)
    # the scheme is case-insensitive, as for every bearer token of the API
    assert (
        await http.get("/metrics", headers={"authorization": f"bearer {METRICS_TOKEN}"})
    ).status_code == 200

    refused = [
        {},
        bearer(METRICS_TOKEN + "x"),
        bearer(METRICS_TOKEN[:-1]),
        {"authorization": f"Basic {METRICS_TOKEN}"},
        {"authorization": METRICS_TOKEN},
        {"x-operator-token": METRICS_TOKEN},
        bearer(OPERATOR_TOKEN),
        {"x-operator-token": OPERATOR_TOKEN},
        bearer(WORKER_TOKEN),
        {"x-worker-token": WORKER_TOKEN},
    ]
    for headers in refused:
        response = await http.get("/metrics", headers=headers)
        assert_unauthenticated(response)
        assert "ops_runs" not in response.text, headers
    missing = await http.get("/metrics")
    assert missing.json()["detail"] == "a metrics token is required"


async def test_the_metrics_token_opens_nothing_else(guarded: AppClient) -> None:
    http = guarded.http
    token = bearer(METRICS_TOKEN)
    assert_unauthenticated(await http.get("/ops-runs", headers=token))
    assert_unauthenticated(
        await http.get("/ops/workers", headers={"x-operator-token": METRICS_TOKEN})
    )
    assert_unauthenticated(
        await http.post("/ops-runs/claim", json={"worker_id": WORKER_ID}, headers=token)
    )
    assert_unauthenticated(await http.post("/ops-runs/expire-leases", headers=token))
    # the ops UI's sign-in takes no such operator: the page again, 401, no session cookie
    signed = await login(http, METRICS_TOKEN, name="operator")
    assert signed.status_code == 401
    assert "set-cookie" not in signed.headers
    # the other credentials still do what they did
    assert (await http.get("/ops-runs", headers=bearer(OPERATOR_TOKEN))).status_code == 200
    claim = await http.post(
        "/ops-runs/claim", json={"worker_id": WORKER_ID}, headers=bearer(WORKER_TOKEN)
    )
    assert claim.status_code == 200, claim.text


async def test_metrics_stay_out_of_the_openapi_document(guarded: AppClient, api: AppClient) -> None:
    for app in (guarded, api):
        document = (await app.http.get("/openapi.json")).json()
        assert "/metrics" not in document["paths"]
        assert all(
            "metrics" not in name.lower() for name in document["components"]["securitySchemes"]
        )


async def test_without_a_metrics_token_metrics_are_open(api: AppClient) -> None:
    for headers in ({}, bearer("anything-at-all-0123456789"), bearer(OPERATOR_TOKEN)):
        response = await api.http.get("/metrics", headers=headers)
        assert response.status_code == 200, response.text
        assert "ops_runs" in metric_names(response.text)


async def test_a_refused_scrape_is_counted_like_every_answer(guarded: AppClient) -> None:
    assert_unauthenticated(await guarded.http.get("/metrics"))
    scraped = await guarded.http.get("/metrics", headers=bearer(METRICS_TOKEN))
    refused = [
        sample.value
        for family in text_string_to_metric_families(scraped.text)
        for sample in family.samples
        if sample.name == "ops_http_requests_total"
        and sample.labels == {"method": "GET", "route": "/metrics", "status": "401"}
    ]
    assert refused == [1.0]


async def test_serve_reads_the_metrics_token_from_its_file(db_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "metrics-token"
    path.write_text(METRICS_TOKEN + "\n", encoding="utf-8")
    path.chmod(0o440)
    env = serve_env(db_dsn, ACTIVITY_CORE_METRICS_TOKEN_FILE=str(path))
    async with (
        serve_process(env) as (_, url),
        httpx.AsyncClient(base_url=url, trust_env=False) as http,
    ):
        allowed = await http.get("/metrics", headers=bearer(METRICS_TOKEN))
        assert allowed.status_code == 200, allowed.text
        assert "ops_runs" in metric_names(allowed.text)
        assert_unauthenticated(await http.get("/metrics"))
        # the file's trailing newline was dropped: the token is exactly the text before it
        assert_unauthenticated(await http.get("/metrics", headers=bearer(METRICS_TOKEN + "x")))


@pytest.mark.parametrize("command", [("migrate",), ("serve", "--port", "1")])
def test_a_short_metrics_token_stops_the_command(command: tuple[str, ...], tmp_path: Path) -> None:
    short = "short-metrics"
    completed = run_cli(
        *command, env=clean_env(ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL, **{VARIABLE: short})
    )
    line = assert_stopped_naming(completed, VARIABLE)
    assert "at least 16 characters" in line and short not in line
    path = tmp_path / "short"
    path.write_text(short + "\n", encoding="utf-8")
    from_file = run_cli(
        *command,
        env=clean_env(
            ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL, **{f"{VARIABLE}_FILE": str(path)}
        ),
    )
    assert "at least 16 characters" in assert_stopped_naming(from_file, VARIABLE)


def _operators_file(tmp_path: Path, token: str) -> str:
    path = tmp_path / "operators.json"
    operators = {"alice": {"token": token_digest(token), "role": "viewer"}}
    path.write_text(json.dumps({"operators": operators}), encoding="utf-8")
    return str(path)


def _workers_file(tmp_path: Path, token: str) -> str:
    path = tmp_path / "workers.json"
    path.write_text(json.dumps({"workers": {"w@x": token_digest(token)}}), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "shared",
    ["operator-token", "worker-token", "operators-file", "worker-credentials-file"],
)
def test_a_metrics_token_that_is_another_credential_stops_serve(
    shared: str, tmp_path: Path
) -> None:
    others = {
        "operator-token": {"ACTIVITY_CORE_OPERATOR_TOKEN": METRICS_TOKEN},
        "worker-token": {
            "ACTIVITY_CORE_WORKER_TOKEN": METRICS_TOKEN,
            "ACTIVITY_CORE_WORKER_ID": WORKER_ID,
        },
        "operators-file": {
            "ACTIVITY_CORE_OPERATORS_FILE": _operators_file(tmp_path, METRICS_TOKEN)
        },
        "worker-credentials-file": {
            "ACTIVITY_CORE_WORKER_CREDENTIALS_FILE": _workers_file(tmp_path, METRICS_TOKEN)
        },
    }[shared]
    completed = run_cli(
        "serve",
        "--port",
        "1",
        env=clean_env(
            ACTIVITY_CORE_DATABASE_URL=UNREACHABLE_URL, **{VARIABLE: METRICS_TOKEN}, **others
        ),
    )
    line = assert_stopped_naming(completed, VARIABLE)
    assert "must differ" in line
    assert METRICS_TOKEN not in completed.stderr
