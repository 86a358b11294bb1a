"""Property-based requests from /openapi.json: never a 5xx, every refusal in the documented body.

Schemathesis drives the in-process app: it runs the app's lifespan itself (the pool and the
listener, as `start_app` in conftest does) and its pytest plugin ends it when each test ends,
before the test database is dropped. Cases carry valid credentials for the kind of endpoint,
the body's worker_id is the authenticated one, and a run id in an /ops-runs path points at a
live claimed run, so generated bodies reach the queue's decisions and the database instead of
stopping at authentication or a 404. Both schema-conforming and schema-violating cases run.

The document's `date-time` and `uuid` formats are generated from the edges of
ac_edges.py (year 1 and 9999 with offsets that leave UTC's range, leap seconds,
`infinity`, naive times; nil, max, braced, URN and hyphenless UUIDs) as well as from
ordinary values. test_ac_edge_walk.py puts the same edges, and cursors, into the
parameters the document does not describe (the ops UI's pages and forms, headers).

(`schemathesis.pytest.from_fixture` would be the usual shape, but its lazy loader reads a
pytest attribute that pytest 9 removed, so each operation runs its own Hypothesis test.)
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict
from schemathesis import Case, GenerationMode
from schemathesis.specs.openapi.formats import unregister_string_format

from ac_edges import timestamps, uuids
from ac_testkit import OPERATOR_TOKEN, WORKER_ID, WORKER_TOKEN, SeededQueue, settings_env
from activity_core.http.app import create_app
from activity_core.settings import load_settings

EXAMPLES_PER_MODE = 25
RUNS_TO_CLOSE = 60
CREDENTIAL_HEADERS = {"authorization", "x-worker-token", "x-operator-token"}
WORKER_OPERATIONS = {
    "POST /ops-runs/claim",
    "POST /ops-runs/{run_id}/heartbeat",
    "POST /ops-runs/{run_id}/complete",
    "POST /ops-runs/{run_id}/fail",
    "PUT /ops-runs/{run_id}/changes",
}

# The changes upload's body is a git bundle, which schemathesis cannot make from a schema:
# arbitrary bytes, and bytes behind a bundle's signature (the header parser's side).
schemathesis.openapi.media_type(
    "application/x-git-bundle",
    st.binary(max_size=512)
    | st.binary(max_size=512).map(lambda tail: b"# v2 git bundle\n" + tail)
    | st.binary(max_size=512).map(lambda tail: b"# v3 git bundle\n@object-format=sha256\n" + tail),
)


def _operation_labels() -> list[str]:
    # create_app touches no database until its lifespan starts, so the schema is readable
    # at collection time; every operation the app documents gets a test.
    app = create_app(load_settings(**settings_env()), dsn="postgresql://unused@127.0.0.1:1/x")
    paths: dict[str, dict[str, Any]] = app.openapi()["paths"]
    return [f"{method.upper()} {path}" for path, item in paths.items() for method in item]


@pytest.fixture(autouse=True)
def edge_formats() -> Iterator[None]:
    """Edges in every `date-time` and `uuid` the document describes (for this module's
    tests only: Schemathesis keeps registered formats process-wide)."""
    schemathesis.openapi.format("date-time", timestamps())
    schemathesis.openapi.format("uuid", uuids())
    try:
        yield
    finally:
        unregister_string_format("date-time")
        unregister_string_format("uuid")


@pytest.fixture
async def run_ids(seeded: SeededQueue) -> Iterator[str]:
    now = datetime.now(UTC)
    ids = [
        str(
            await seeded.run(
                state="claimed",
                claim_owner=WORKER_ID,
                lease_until=now + timedelta(hours=1),
                attempt=1,
                labels=["automated", f"batch-{i % 3}"],
            )
        )
        for i in range(RUNS_TO_CLOSE)
    ]
    await seeded.runs(5)  # open rows for generated claims to find
    return itertools.cycle(ids)


@pytest.mark.parametrize("label", _operation_labels())
def test_no_generated_request_gets_a_5xx_or_an_undocumented_error_body(
    db_dsn: str, run_ids: Iterator[str], label: str
) -> None:
    app = create_app(load_settings(**settings_env()), dsn=db_dsn)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operation = schema.find_operation_by_label(label)
    assert operation is not None, label
    token = WORKER_TOKEN if label in WORKER_OPERATIONS else OPERATOR_TOKEN

    def check(case: Case[Any]) -> None:
        if case.headers:
            # the document's security schemes make Schemathesis generate credentials; the
            # case carries the valid one below instead, so its request gets past them
            case.headers = CaseInsensitiveDict(
                {
                    name: value
                    for name, value in case.headers.items()
                    if name.lower() not in CREDENTIAL_HEADERS
                }
            )
        if isinstance(case.body, dict):
            if isinstance(case.body.get("worker_id"), str):
                case.body["worker_id"] = WORKER_ID
            wait = case.body.get("wait_seconds")
            if isinstance(wait, int) and not isinstance(wait, bool) and 0 < wait <= 20:
                # a valid long poll on an empty match only waits; test_ac_long_poll covers it
                case.body["wait_seconds"] = 0
        if label.startswith(("POST /ops-runs/{run_id}", "GET /ops-runs/{run_id}")):
            case.path_parameters = {**(case.path_parameters or {}), "run_id": next(run_ids)}

        response = case.call(headers={"Authorization": f"Bearer {token}"})

        described = f"{label}: {response.status_code} {response.text[:500]}"
        assert response.status_code < 500, described
        if response.status_code >= 400:
            body: Any = json.loads(response.text)
            assert isinstance(body, dict), described
            assert isinstance(body.get("code"), str), described
            assert body["code"], described
            assert isinstance(body.get("detail"), str), described
            if response.status_code == 422:
                assert body["code"] == "invalid_request", described
                assert isinstance(body.get("errors"), list) and body["errors"], described

    has_input = any(
        len(part)
        for part in (operation.path_parameters, operation.query, operation.headers, operation.body)
    )
    # an operation without parameters or body has nothing to violate
    modes = (
        [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
        if has_input
        else [GenerationMode.POSITIVE]
    )
    for mode in modes:
        run = settings(
            max_examples=EXAMPLES_PER_MODE,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.filter_too_much,
                HealthCheck.data_too_large,
                HealthCheck.large_base_example,
            ],
        )(given(case=operation.as_strategy(generation_mode=mode))(check))
        run()
