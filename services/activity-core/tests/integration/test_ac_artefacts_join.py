"""GET /ops/automations/{id}/runs[/{run_id}]: which ops runs belong to which fire.

Rules, in order: the fire's run id exactly; the per-fire triggering event id it recorded;
an ops run key containing the run id; else the fire's time window. Never across
automations.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from ac_fires import HARNESS_EVIDENCE, SeededAutomations, at, completed_result
from ac_testkit import AppClient


@pytest.fixture
def seed(db: asyncpg.Connection) -> SeededAutomations:
    return SeededAutomations(db)


async def detail(api: AppClient, automation: str, run: str) -> dict[str, Any]:
    response = await api.http.get(
        f"/ops/automations/{automation}/runs/{run}", headers=api.operator_headers()
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def matched(body: dict[str, Any]) -> dict[str, str]:
    return {run["id"]: run["matched_by"] for run in body["run"]["ops_runs"]}


async def test_exact_run_id_event_key_and_contains(api: AppClient, seed: SeededAutomations) -> None:
    a = await seed.automation("brief", cron="0 6 * * 1-5", timezone="Europe/Berlin")
    _, manual = await seed.fire(a, started_at=at(0), finished_at=at(5), run_id="run-7f3a9c21")
    _, sched = await seed.fire(
        a,
        started_at=at(100),
        finished_at=at(105),
        trigger_key="scheduled",
        triggering_event_id="scheduled:2024-05-01T06:00:00+00:00",
        run_id="run-0b1c2d3e",
    )
    exact = await seed.ops_run(a, triggering_event_id="run-7f3a9c21", created_at=at(1))
    contains = await seed.ops_run(
        a, triggering_event_id="manual:run-7f3a9c21:retry", created_at=at(2)
    )
    # created in the scheduled fire's window, but its key names the manual fire
    keyed_elsewhere = await seed.ops_run(
        a, triggering_event_id="request/run-7f3a9c21", created_at=at(101)
    )
    by_event = await seed.ops_run(
        a, triggering_event_id="scheduled:2024-05-01T06:00:00+00:00", created_at=at(300)
    )

    assert matched(await detail(api, "brief", manual)) == {
        str(exact): "run_id",
        str(contains): "contains",
        str(keyed_elsewhere): "contains",
    }
    assert matched(await detail(api, "brief", sched)) == {str(by_event): "triggering_event"}


async def test_time_window_for_a_finished_fire(api: AppClient, seed: SeededAutomations) -> None:
    a = await seed.automation("legacy")
    _, fire = await seed.fire(
        a, started_at=at(0), finished_at=at(60), triggering_event_id="scheduled"
    )
    before = await seed.ops_run(a, triggering_event_id="scheduled", created_at=at(-1))
    first = await seed.ops_run(a, triggering_event_id="scheduled", created_at=at(0))
    inside = await seed.ops_run(a, triggering_event_id="something-else", created_at=at(30))
    edge = await seed.ops_run(a, triggering_event_id="x", created_at=at(60))
    after = await seed.ops_run(a, triggering_event_id="x", created_at=at(61))

    body = await detail(api, "legacy", fire)
    assert matched(body) == {
        str(first): "time_window",
        str(inside): "time_window",
        str(edge): "time_window",
    }
    assert str(before) not in matched(body) and str(after) not in matched(body)


async def test_bare_scheduled_key_is_never_an_exact_match(
    api: AppClient, seed: SeededAutomations
) -> None:
    """The old bug gave every fire `scheduled`; its one ops run belongs to the first fire."""
    a = await seed.automation("old-bug")
    _, monday = await seed.fire(
        a, started_at=at(0), finished_at=at(10), triggering_event_id="scheduled"
    )
    _, tuesday = await seed.fire(
        a, started_at=at(86400), finished_at=at(86410), triggering_event_id="scheduled"
    )
    only = await seed.ops_run(a, triggering_event_id="scheduled", created_at=at(5))
    assert matched(await detail(api, "old-bug", monday)) == {str(only): "time_window"}
    assert matched(await detail(api, "old-bug", tuesday)) == {}


async def test_an_unfinished_fire_has_a_bounded_window_that_stops_at_the_next_fire(
    api: AppClient, seed: SeededAutomations
) -> None:
    from activity_core.artefacts.service import OPEN_FIRE_WINDOW_SECONDS as WINDOW

    a = await seed.automation("crashed")
    _, crashed = await seed.fire(a, started_at=at(0), finished_at=None, run_id="r1")
    late = await seed.ops_run(a, triggering_event_id="x", created_at=at(WINDOW - 1))
    beyond = await seed.ops_run(a, triggering_event_id="x", created_at=at(WINDOW + 1))
    assert matched(await detail(api, "crashed", crashed)) == {str(late): "time_window"}

    b = await seed.automation("overlap")
    _, first = await seed.fire(b, started_at=at(0), finished_at=None, run_id="r2")
    _, second = await seed.fire(b, started_at=at(30), finished_at=at(40), run_id="r3")
    mine = await seed.ops_run(b, triggering_event_id="x", created_at=at(29))
    theirs = await seed.ops_run(b, triggering_event_id="x", created_at=at(35))
    assert matched(await detail(api, "overlap", first)) == {str(mine): "time_window"}
    assert matched(await detail(api, "overlap", second)) == {str(theirs): "time_window"}
    del beyond


async def test_a_keyed_fire_gets_no_window_matches(api: AppClient, seed: SeededAutomations) -> None:
    a = await seed.automation("keyed")
    _, fire = await seed.fire(a, started_at=at(0), finished_at=at(60), run_id="run-keyed-01")
    keyed = await seed.ops_run(a, triggering_event_id="run-keyed-01", created_at=at(10))
    await seed.ops_run(a, triggering_event_id="unrelated", created_at=at(20))
    assert matched(await detail(api, "keyed", fire)) == {str(keyed): "run_id"}


async def test_short_run_ids_are_not_searched_for(api: AppClient, seed: SeededAutomations) -> None:
    a = await seed.automation("short")
    _, fire = await seed.fire(a, started_at=at(0), finished_at=at(1), run_id="r7")
    await seed.ops_run(a, triggering_event_id="manual:r7", created_at=at(500))
    assert matched(await detail(api, "short", fire)) == {}


async def test_no_leakage_across_automations(api: AppClient, seed: SeededAutomations) -> None:
    a = await seed.automation("alpha")
    b = await seed.automation("beta")
    _, fire_a = await seed.fire(a, started_at=at(0), finished_at=at(60), run_id="run-shared-0001")
    _, fire_b = await seed.fire(b, started_at=at(0), finished_at=at(60), run_id="run-beta-0001")
    own = await seed.ops_run(a, triggering_event_id="run-shared-0001", created_at=at(1))
    # the other automation's runs: the same key, a key containing it, one in the window
    b_same = await seed.ops_run(b, triggering_event_id="run-shared-0001", created_at=at(1))
    b_contains = await seed.ops_run(b, triggering_event_id="x:run-shared-0001", created_at=at(2))
    b_window = await seed.ops_run(b, triggering_event_id="nothing", created_at=at(3))

    assert matched(await detail(api, "alpha", fire_a)) == {str(own): "run_id"}
    # keys naming another automation's fire do not tie b's runs to it: they are b's,
    # attributed to b's fire by its window
    assert matched(await detail(api, "beta", fire_b)) == {
        str(b_same): "time_window",
        str(b_contains): "time_window",
        str(b_window): "time_window",
    }
    # a fire is only reachable under its own automation
    response = await api.http.get(
        f"/ops/automations/beta/runs/{fire_a}", headers=api.operator_headers()
    )
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


async def test_slug_uuid_and_not_found(api: AppClient, seed: SeededAutomations) -> None:
    a = await seed.automation("brief")
    fire_uuid, fire = await seed.fire(a, started_at=at(0), finished_at=at(1))
    by_slug = await detail(api, "brief", fire)
    by_ids = await detail(api, str(a), str(fire_uuid))
    assert by_slug == by_ids
    assert by_slug["automation"]["id"] == str(a)
    h = api.operator_headers()
    for path in (
        "/ops/automations/nope/runs",
        "/ops/automations/nope/runs/x",
        "/ops/automations/brief/runs/not-a-fire",
        f"/ops/automations/{a.hex[:8]}/runs",
    ):
        response = await api.http.get(path, headers=h)
        assert response.status_code == 404, path
        assert set(response.json()) == {"code", "detail"}
        assert response.json()["code"] == "not_found"


async def test_runs_are_newest_first_with_keyset_pages(
    api: AppClient, seed: SeededAutomations
) -> None:
    a = await seed.automation("paged")
    fires = [
        (await seed.fire(a, started_at=at(i * 10), finished_at=at(i * 10 + 1)))[1] for i in range(7)
    ]
    # two fires at the same instant: the keyset must still visit both once
    fires.append((await seed.fire(a, started_at=at(60), finished_at=at(61)))[1])
    pages = await api.pages("/ops/automations/paged/runs", limit=3)
    seen = [run["run_id"] for page in pages for run in page["runs"]]
    assert len(pages) == 3
    assert sorted(seen) == sorted(fires) and len(seen) == len(set(seen))
    starts = [fires.index(r) for r in seen]
    assert starts[-1] == 0  # the oldest comes last

    forged = await api.http.get(
        "/ops/automations/paged/runs",
        params={"cursor": "bm90LWEtY3Vyc29y"},
        headers=api.operator_headers(),
    )
    assert forged.status_code == 422
    assert forged.json()["code"] == "invalid_request"
    assert [e["loc"] for e in forged.json()["errors"]] == [["query", "cursor"]]


async def test_run_detail_exposes_artefacts_and_compact_evidence(
    api: AppClient, seed: SeededAutomations
) -> None:
    a = await seed.automation("brief", "FI daily brief")
    _, fire = await seed.fire(a, started_at=at(0), finished_at=at(5), run_id="run-11112222")
    done = await seed.ops_run(
        a,
        triggering_event_id="run-11112222",
        created_at=at(1),
        state="succeeded",
        attempt=1,
        claim_owner="rein-aharness@railiance01",
        result=completed_result(path="briefs/2024 05 01.md"),
    )
    body = await detail(api, "brief", fire)
    (run,) = body["run"]["ops_runs"]
    assert run["id"] == str(done)
    assert run["state"] == "succeeded" and run["disposition"] == "succeeded"
    assert run["attempt"] == 1 and run["claim_owner"] == "rein-aharness@railiance01"
    assert run["execution_evidence"] == {**HARNESS_EVIDENCE, "outcome": "succeeded"}
    # not published, no stored changes: no link at all (the commit is the worker's only)
    expected = {
        "ops_run_id": str(done),
        "path": "briefs/2024 05 01.md",
        "head_after": "0123456789abcdef0123456789abcdef01234567",
        "target_repo": "research/briefs",
        "forgejo_url": None,
        "change_url": None,
    }
    assert run["artifacts"] == [expected]
    assert body["run"]["artifacts"] == [expected]
    # published: the Forgejo link, at the published commit
    await publish_directly(seed.conn, done, "0123456789abcdef0123456789abcdef01234567")
    body = await detail(api, "brief", fire)
    expected["forgejo_url"] = (
        "https://forgejo.coulomb.social/research/briefs/src/commit/"
        "0123456789abcdef0123456789abcdef01234567/briefs/2024%2005%2001.md"
    )
    assert body["run"]["artifacts"] == [expected]


async def publish_directly(conn: Any, run_id: uuid.UUID, commit: str) -> None:
    """A published publication row, as PublishChangesWorkflow records it."""
    await conn.execute(
        """INSERT INTO ops_run_publications (run_id, attempt, state, ref, commit, requested_by,
               requested_at, published_at, workflow_id)
           VALUES ($1, 1, 'published', 'refs/heads/rein/x/1', $2, 'alice', now(), now(), 'w')""",
        run_id,
        commit,
    )


async def test_forgejo_base_comes_from_settings(app_factory: Any, seed: SeededAutomations) -> None:
    api = await app_factory(FORGEJO_WEB_BASE="https://git.example.org/forge/")
    a = await seed.automation("brief")
    _, fire = await seed.fire(a, started_at=at(0), finished_at=at(5), run_id="run-33334444")
    await seed.ops_run(
        a,
        triggering_event_id="run-33334444",
        created_at=at(1),
        state="succeeded",
        result=completed_result(),
    )
    (run,) = (await detail(api, "brief", fire))["run"]["ops_runs"]
    await publish_directly(seed.conn, uuid.UUID(run["id"]), run["artifacts"][0]["head_after"])
    (art,) = (await detail(api, "brief", fire))["run"]["artifacts"]
    assert art["forgejo_url"].startswith("https://git.example.org/forge/research/briefs/src/")


async def test_index_lists_schedule_last_fire_and_counts(
    api: AppClient, seed: SeededAutomations
) -> None:
    a = await seed.automation(
        "brief", "FI daily brief", cron="0 6 * * 1-5", timezone="Europe/Berlin"
    )
    await seed.automation("idle", "Idle one", paused=True)
    await seed.fire(a, started_at=at(0), finished_at=at(1), run_id="older")
    await seed.fire(a, started_at=at(50), run_id="newest")
    await seed.ops_run(a, triggering_event_id="x", created_at=at(1))
    await seed.ops_run(a, triggering_event_id="y", created_at=at(2))
    await seed.ops_run(a, triggering_event_id="z", created_at=at(3), state="claimed")
    await seed.ops_run(a, triggering_event_id="w", created_at=at(4), state="failed")

    response = await api.http.get("/ops/automations", headers=api.operator_headers())
    assert response.status_code == 200, response.text
    by_slug = {item["slug"]: item for item in response.json()["automations"]}
    brief, idle = by_slug["brief"], by_slug["idle"]
    assert brief["schedule"] == {"cron": "0 6 * * 1-5", "timezone": "Europe/Berlin"}
    assert brief["last_fire"]["run_id"] == "newest"
    assert brief["last_fire"]["status"] == "started"
    assert brief["queue_counts"] == {
        "open": 2,
        "claimed": 1,
        "succeeded": 0,
        "failed": 1,
        "expired": 0,
    }
    assert idle["schedule"] is None and idle["paused"] is True and idle["last_fire"] is None
    assert set(idle["queue_counts"].values()) == {0}


async def test_openapi_documents_the_artefact_endpoints(api: AppClient) -> None:
    spec = (await api.http.get("/openapi.json")).json()
    for path in (
        "/ops/automations",
        "/ops/automations/{automation_id}/runs",
        "/ops/automations/{automation_id}/runs/{run_id}",
    ):
        operation = spec["paths"][path]["get"]
        assert "200" in operation["responses"] and "401" in operation["responses"]
    detail_op = spec["paths"]["/ops/automations/{automation_id}/runs/{run_id}"]["get"]
    assert detail_op["responses"]["404"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorBody"
    )
    assert not any(path.startswith("/ops/ui") for path in spec["paths"])
