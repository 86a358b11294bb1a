"""GET /ops-runs filters and keyset pagination; GET /ops-runs/{id}."""

from __future__ import annotations

import uuid
from typing import Any

from ac_testkit import AppClient, SeededQueue


async def test_list_filters(api: AppClient, seeded: SeededQueue) -> None:
    a = await seeded.run(labels=["automated", "brief"], target_repo="research/briefs")
    b = await seeded.run(labels=["automated"], target_repo="ops/maintenance")
    c = await seeded.run(
        labels=["brief"], target_repo="research/briefs", state="failed", claim_owner="w", attempt=1
    )
    h = api.operator_headers()

    async def ids(params: dict[str, Any]) -> set[str]:
        response = await api.http.get("/ops-runs", params=params, headers=h)
        assert response.status_code == 200, response.text
        return {run["id"] for run in response.json()["runs"]}

    assert await ids({}) == {str(a), str(b), str(c)}
    assert await ids({"state": "open"}) == {str(a), str(b)}
    assert await ids({"state": "failed"}) == {str(c)}
    assert await ids({"label": "brief"}) == {str(a), str(c)}
    assert await ids({"label": ["automated", "brief"]}) == {str(a)}
    assert await ids({"target_repo": "ops/maintenance"}) == {str(b)}
    definition = await seeded.definition()
    assert await ids({"activity_definition_id": str(definition)}) == {str(a), str(b), str(c)}
    assert await ids({"activity_definition_id": str(uuid.uuid4())}) == set()


async def test_keyset_pagination_visits_every_run_once(api: AppClient, seeded: SeededQueue) -> None:
    created = {str(r) for r in await seeded.runs(23)}
    pages = await api.pages("/ops-runs", limit=5)
    seen = [run["id"] for page in pages for run in page["runs"]]
    assert len(pages) == 5
    assert len(seen) == len(set(seen)) == 23
    assert set(seen) == created


async def test_a_forged_cursor_is_invalid_request(api: AppClient) -> None:
    response = await api.http.get(
        "/ops-runs", params={"cursor": "not-a-cursor!"}, headers=api.operator_headers()
    )
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "invalid_request"
    assert [e["loc"] for e in body["errors"]] == [["query", "cursor"]]


async def test_get_one_run(api: AppClient, seeded: SeededQueue) -> None:
    run_id = await seeded.run()
    response = await api.http.get(f"/ops-runs/{run_id}", headers=api.operator_headers())
    assert response.status_code == 200
    assert response.json()["id"] == str(run_id)
    assert "close_intent_digest" not in response.json()
    missing = await api.http.get(f"/ops-runs/{uuid.uuid4()}", headers=api.operator_headers())
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
