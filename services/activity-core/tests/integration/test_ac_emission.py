"""Emission against real PostgreSQL: idempotency, batch atomicity, the audit, and the
IssueSink write as its own step (`emit_tasks`, then `publish_pending`)."""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
import respx

from ac_definitions import GRANT, RecordingApplier, definition_doc, spec_of
from ac_testkit import AppClient
from activity_core.definitions.model import ActivityDefinitionSpec
from activity_core.definitions.sync import sync_definitions
from activity_core.emission.emit import (
    EmissionPolicyError,
    EmitReport,
    FireContext,
    SpawnOutcome,
    emit_tasks,
)
from activity_core.emission.errors import DefinitionNotSyncedError, IssueSinkError
from activity_core.emission.publish import (
    SinkTotals,
    SinkUnavailable,
    give_up,
    publish_pending,
)
from activity_core.emission.sink import SinkTask, StateHubSink, StillOwed
from activity_core.emission.trigger import emit_triggering_event_id
from ops_contracts import ATTRIBUTION_REF_KEYS

MONDAY = datetime(2026, 3, 2, 5, 0, tzinfo=UTC)
STATE_HUB = "http://state-hub.test"


@dataclass
class FakeSink:
    """Records every publish; the first ``fail_times`` publishes raise IssueSinkError (a
    sink that is down), and keys in ``refuse`` are refused (a conclusive 4xx)."""

    fail_times: int = 0
    refuse: set[str] = field(default_factory=set)
    published: list[SinkTask] = field(default_factory=list)
    attempts: int = 0

    @property
    def name(self) -> str:
        return "fake"

    async def publish(self, task: SinkTask, *, still_owed: StillOwed | None = None) -> str | None:
        self.attempts += 1
        if self.attempts <= self.fail_times:
            raise IssueSinkError("sink down", status=503)
        if task.source_id in self.refuse:
            raise IssueSinkError("refused: HTTP 422", status=422, conclusive=True)
        self.published.append(task)
        return f"ref-{len(self.published)}"

    async def aclose(self) -> None:
        return None


async def synced(pool: asyncpg.Pool, *docs: dict[str, Any]) -> list[ActivityDefinitionSpec]:
    specs = [spec_of(doc) for doc in docs] or [spec_of(definition_doc())]
    await sync_definitions(pool, specs, RecordingApplier())
    return specs


def scheduled_fire(scheduled_for: datetime = MONDAY, run_id: str = "run-1", **extra: Any) -> Any:
    values: dict[str, Any] = {
        "activity_run_id": None,
        "run_id": run_id,
        "trigger_key": "scheduled",
        "triggering_event_id": emit_triggering_event_id("scheduled", scheduled_for, run_id),
        "scheduled_for": scheduled_for,
        "fired_at": scheduled_for + timedelta(seconds=2),
        "context": {"schedule": {"scheduled_for": scheduled_for.isoformat()}},
    }
    values.update(extra)
    return FireContext(**values)


def manual_fire(request: dict[str, Any], key: str = "manual:1") -> FireContext:
    return FireContext(
        activity_run_id=None,
        run_id=f"run-{key}",
        trigger_key=key,
        triggering_event_id=key,
        scheduled_for=None,
        fired_at=MONDAY,
        context={"request": request},
    )


async def recorded(
    pool: asyncpg.Pool, spec: ActivityDefinitionSpec, fire: FireContext
) -> FireContext:
    """The fire with its activity_runs row, as the workflow's record step writes it."""
    activity_run_id = uuid.uuid4()
    await pool.execute(
        """INSERT INTO activity_runs (id, activity_definition_id, workflow_id, run_id,
               trigger_key, triggering_event_id, scheduled_for, context)
           VALUES ($1, $2, 'wf', $3, $4, $5, $6, $7)""",
        activity_run_id,
        spec.uuid,
        fire.run_id,
        fire.trigger_key,
        fire.triggering_event_id,
        fire.scheduled_for,
        dict(fire.context),
    )
    return replace(fire, activity_run_id=activity_run_id)


async def emit(
    pool: asyncpg.Pool,
    sink: Any,
    spec: ActivityDefinitionSpec,
    fire: FireContext,
    *,
    queue_enabled: bool = True,
    require_profile: bool = False,
) -> EmitReport:
    return await emit_tasks(
        pool,
        sink.name,
        spec=spec,
        fire=fire,
        queue_enabled=queue_enabled,
        require_profile=require_profile,
    )


async def fire_through(
    pool: asyncpg.Pool, sink: Any, spec: ActivityDefinitionSpec, fire: FireContext, **kw: Any
) -> tuple[EmitReport, SinkTotals]:
    """What a fire's workflow does: record, emit, then write the sink."""
    fire = fire if fire.activity_run_id is not None else await recorded(pool, spec, fire)
    report = await emit(pool, sink, spec, fire, **kw)
    assert fire.activity_run_id is not None
    totals = await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
    return report, totals


async def ops_runs(db: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(await db.fetch("SELECT * FROM ops_runs ORDER BY created_at, id"))


async def audit(db: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(await db.fetch("SELECT * FROM task_spawn_log ORDER BY id"))


# --- the emitted run --------------------------------------------------------------------------


async def test_a_fire_emits_an_open_run_and_the_audit_then_writes_the_sink(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool)
    sink = FakeSink()
    fire = await recorded(
        pool,
        spec,
        manual_fire(
            {
                "correlation_id": "corr-1",
                "goal_ref": "goal-7",
                "topic": "rates",
                "token": "secret-never-carried",
            }
        ),
    )
    report = await emit(pool, sink, spec, fire)

    [run] = await ops_runs(db)
    assert run["state"] == "open"
    assert run["idempotency_key"] == "fi-daily-brief:daily-brief:manual:1"
    assert run["activity_definition_id"] == spec.uuid
    assert run["title"] == "Research brief for 2026-03-02"
    assert run["description"] == "Brief for rates"
    assert run["labels"] == ["automated", "research-brief"]
    assert run["priority"] == "medium"
    assert (run["source_type"], run["source_id"]) == ("rule", "daily-brief")
    assert run["triggering_event_id"] == "manual:1"
    assert run["harness_profile_ref"] == "harness.agent-dev@1.0.0"
    assert run["execution_refs"] == {"correlation_id": "corr-1", "goal_refs": ["goal-7"]}
    assert run["repository_grant"] == GRANT
    assert (run["claim_owner"], run["lease_until"], run["attempt"]) == (None, None, 0)

    # the audit row is written with the run, owing the sink its write; the sink is not
    # touched by the emission
    assert sink.attempts == 0
    [row] = await audit(db)
    assert row["outcome"] == "created"
    assert row["ops_run_id"] == run["id"]
    assert row["activity_run_id"] == fire.activity_run_id
    assert (row["issue_sink"], row["issue_sink_ref"], row["sink_status"]) == (
        "fake",
        None,
        "pending",
    )
    assert row["sink_payload"]["ops_run_id"] == str(run["id"])
    assert row["idempotency_key"] == run["idempotency_key"]
    assert [item.outcome for item in report.items] == [SpawnOutcome.created]
    assert report.emitted_count == 1
    assert report.sink_writes_left == 1
    # the fire is emitted in the same transaction
    fire_row = await db.fetchrow("SELECT * FROM activity_runs WHERE id = $1", fire.activity_run_id)
    assert fire_row is not None
    assert (fire_row["status"], fire_row["emitted_count"]) == ("emitted", 1)
    assert fire_row["finished_at"] is not None

    assert fire.activity_run_id is not None
    totals = await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
    assert totals == SinkTotals(written=1, failed=0)
    [published] = sink.published
    assert published.ops_run_id == run["id"]
    assert published.idempotency_key == run["idempotency_key"]
    assert published.title == run["title"]
    assert published.repository_grant == GRANT
    [row] = await audit(db)
    assert (row["sink_status"], row["issue_sink_ref"], row["sink_payload"]) == (
        "written",
        "ref-1",
        None,
    )
    # nothing left to write: a second publish sends nothing
    assert await publish_pending(pool, sink, activity_run_id=fire.activity_run_id) == totals
    assert sink.attempts == 1


async def test_only_allowlisted_attribution_keys_reach_the_queue(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    doc = definition_doc()
    doc["rules"][0]["action"]["execution_refs"] = {
        "correlation_id": "context.request.correlation_id",
        "causation_id": "context.request.causation_id",
        "goal_refs": ["context.request.goal_ref", "context.request.goals"],
        "initiative_refs": ["context.request.initiative"],
        "request_ref": "context.request.missing",
    }
    [spec] = await synced(pool, doc)
    request = {
        "correlation_id": "c",
        "causation_id": "cause",
        "goal_ref": "g1",
        "goals": ["g2", {"not": "a ref"}],
        "initiative": "i1",
        "authorization": "Bearer nope",
        "repository_grant": {"allowed_paths": ["/"]},
    }
    await emit(pool, FakeSink(), spec, manual_fire(request))
    [run] = await ops_runs(db)
    assert run["execution_refs"] == {
        "correlation_id": "c",
        "causation_id": "cause",
        "goal_refs": ["g1", "g2"],
        "initiative_refs": ["i1"],
    }
    assert set(run["execution_refs"]) <= set(ATTRIBUTION_REF_KEYS)
    # the grant is the definition's, as admitted; nothing from the request reaches it
    assert run["repository_grant"] == GRANT


async def test_the_grant_is_copied_exactly_and_never_rendered(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    grant = {
        "version": "1",
        "allowed_paths": ["z/{scheduled_for}/", "docs/**", "a/*.md", "README.md"],
        "commit_count": {"min": 2, "max": 5},
        "publish": False,
    }
    doc = definition_doc()
    doc["rules"][0]["action"]["repository_grant"] = grant
    [spec] = await synced(pool, doc)
    sink = FakeSink()
    await fire_through(pool, sink, spec, scheduled_fire())
    [run] = await ops_runs(db)
    assert run["repository_grant"] == grant
    assert list(run["repository_grant"]["allowed_paths"]) == grant["allowed_paths"]
    assert "repository_grant" not in run["execution_refs"]
    assert sink.published[0].repository_grant == grant


# --- idempotency ------------------------------------------------------------------------------


async def test_concurrent_duplicate_emits_create_one_run(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool)
    sink = FakeSink()
    fire = await recorded(pool, spec, scheduled_fire())
    reports = await asyncio.gather(*(emit(pool, sink, spec, fire) for _ in range(10)))

    [run] = await ops_runs(db)
    outcomes = sorted(r.items[0].outcome.value for r in reports)
    assert outcomes == ["created"] + ["duplicate"] * 9
    rows = await audit(db)
    assert sorted(r["outcome"] for r in rows) == ["created"] + ["duplicate"] * 9
    assert {r["ops_run_id"] for r in rows} == {run["id"]}
    # one write is owed, by the created row; the duplicates owe none
    assert sorted(r["sink_status"] for r in rows) == ["none"] * 9 + ["pending"]
    assert all(r.emitted_count == 1 for r in reports)
    assert fire.activity_run_id is not None
    await asyncio.gather(
        *(publish_pending(pool, sink, activity_run_id=fire.activity_run_id) for _ in range(3))
    )
    assert {t.idempotency_key for t in sink.published} == {run["idempotency_key"]}
    assert [r["sink_status"] for r in await audit(db)].count("written") == 1


async def test_two_scheduled_fires_create_two_runs_and_a_replay_creates_none(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    """The spec's cron bug: every weekday must reach the queue, each exactly once."""
    [spec] = await synced(pool)
    sink = FakeSink()
    monday = scheduled_fire(MONDAY, run_id="run-mon")
    tuesday = scheduled_fire(MONDAY + timedelta(days=1), run_id="run-tue")
    await fire_through(pool, sink, spec, monday)
    await fire_through(pool, sink, spec, tuesday)
    # the same fire again (an activity retry, or a new run id for the same scheduled time)
    replay, totals = await fire_through(
        pool, sink, spec, scheduled_fire(MONDAY, run_id="run-mon-2")
    )

    runs = await ops_runs(db)
    assert [r["triggering_event_id"] for r in runs] == [
        "scheduled:2026-03-02T05:00:00+00:00",
        "scheduled:2026-03-03T05:00:00+00:00",
    ]
    assert [r["title"] for r in runs] == [
        "Research brief for 2026-03-02",
        "Research brief for 2026-03-03",
    ]
    assert replay.items[0].outcome is SpawnOutcome.duplicate
    assert replay.sink_writes_left == 0
    assert totals == SinkTotals(written=1, failed=0)  # Monday's write, done by the original
    assert len(sink.published) == 2


# --- batch atomicity --------------------------------------------------------------------------


def three_rules(**third: Any) -> dict[str, Any]:
    doc = definition_doc()
    first = doc["rules"][0]
    doc["rules"] = [
        first,
        {**first, "id": "second"},
        {**first, "id": "third", "action": {**first["action"], **third}},
    ]
    return doc


async def test_a_policy_failure_emits_nothing_of_the_batch(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    doc = three_rules()
    del doc["rules"][2]["action"]["harness_profile_ref"]
    [spec] = await synced(pool, doc)
    sink = FakeSink()
    with pytest.raises(EmissionPolicyError) as caught:
        await emit(pool, sink, spec, scheduled_fire(), require_profile=True)
    assert [p.field_path for p in caught.value.problems] == ["rules[2].action.harness_profile_ref"]
    assert await ops_runs(db) == []
    assert await audit(db) == []
    assert sink.attempts == 0
    # the flag off: the same batch emits all three
    report = await emit(pool, sink, spec, scheduled_fire(), require_profile=False)
    assert report.emitted_count == 3


async def test_a_malformed_ref_or_grant_in_a_stored_definition_emits_nothing(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool, three_rules())
    third = spec.rules[2]
    broken = spec.model_copy(
        update={
            "rules": (
                *spec.rules[:2],
                third.model_copy(
                    update={
                        "action": third.action.model_copy(
                            update={
                                "harness_profile_ref": "harness.agent-dev",
                                "approach_hint": "legacy-match",
                            }
                        )
                    }
                ),
            )
        }
    )
    sink = FakeSink()
    with pytest.raises(EmissionPolicyError, match="exactly one '@'"):
        await emit(pool, sink, broken, scheduled_fire())
    assert (await ops_runs(db), await audit(db), sink.attempts) == ([], [], 0)


async def test_a_template_that_cannot_render_emits_nothing(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool, three_rules(task_template="n={context.request.n:d}"))
    sink = FakeSink()
    with pytest.raises(EmissionPolicyError, match="does not fit"):
        await emit(pool, sink, spec, manual_fire({"n": "not a number"}))
    assert (await ops_runs(db), sink.attempts) == ([], 0)


async def test_an_unsynced_definition_emits_nothing(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    sink = FakeSink()
    with pytest.raises(DefinitionNotSyncedError):
        await emit(pool, sink, spec_of(definition_doc()), scheduled_fire())
    assert (await ops_runs(db), sink.attempts) == ([], 0)


async def test_a_batch_is_one_transaction(pool: asyncpg.Pool, db: asyncpg.Connection) -> None:
    # the third item's run cannot be inserted (a trigger stands in for any database error
    # mid-batch): the first two, their audit rows and the fire's status roll back with it
    [spec] = await synced(pool, three_rules())
    await db.execute(
        """
        CREATE FUNCTION refuse_third() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.source_id = 'third' THEN RAISE EXCEPTION 'no third run'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_third BEFORE INSERT ON ops_runs
            FOR EACH ROW EXECUTE FUNCTION refuse_third();
        """
    )
    fire = await recorded(pool, spec, scheduled_fire())
    with pytest.raises(asyncpg.RaiseError, match="no third run"):
        await emit(pool, FakeSink(), spec, fire)
    assert (await ops_runs(db), await audit(db)) == ([], [])
    status = await db.fetchval(
        "SELECT status FROM activity_runs WHERE id = $1", fire.activity_run_id
    )
    assert status == "started"

    await db.execute("DROP TRIGGER refuse_third ON ops_runs")
    report = await emit(pool, FakeSink(), spec, fire)  # the retry emits the whole batch
    assert [item.outcome for item in report.items] == [SpawnOutcome.created] * 3


# --- the sink: its own step, after every ops run is queued ------------------------------------


@respx.mock
async def test_sink_down_then_up_leaves_the_run_queued_and_writes_it_once(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool)
    route = respx.post(f"{STATE_HUB}/progress").mock(
        side_effect=[httpx.Response(503)] * 3 + [httpx.Response(201, json={"id": "hub-1"})]
    )
    sink = StateHubSink(STATE_HUB, attempts=3, backoff_initial=0, backoff_max=0)
    fire = await recorded(pool, spec, scheduled_fire())
    assert fire.activity_run_id is not None
    try:
        report = await emit(pool, sink, spec, fire)
        assert report.items[0].outcome is SpawnOutcome.created
        [run] = await ops_runs(db)  # queued whatever the sink does
        [row] = await audit(db)
        assert (row["outcome"], row["ops_run_id"], row["sink_status"]) == (
            "created",
            run["id"],
            "pending",
        )

        with pytest.raises(SinkUnavailable, match="after 3 attempts"):
            await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
        assert route.call_count == 3  # bounded
        [row] = await audit(db)
        assert row["sink_status"] == "pending"
        assert "HTTP 503" in row["sink_error"]

        # what Temporal's retry of the sink step does
        totals = await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
        assert totals == SinkTotals(written=1, failed=0)
        assert [r["id"] for r in await ops_runs(db)] == [run["id"]]
        [row] = await audit(db)
        assert (row["sink_status"], row["issue_sink"], row["issue_sink_ref"]) == (
            "written",
            "state-hub",
            "hub-1",
        )
        assert row["sink_error"] is None
        keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
        assert keys == {run["idempotency_key"]}
        assert json.loads(route.calls.last.request.content)["ops_run_id"] == str(run["id"])

        # a later replay of the completed fire: audit only, no sink call
        again, _ = await fire_through(pool, sink, spec, scheduled_fire(run_id="run-again"))
        assert again.items[0].outcome is SpawnOutcome.duplicate
        assert route.call_count == 4
        assert len(await ops_runs(db)) == 1
    finally:
        await sink.aclose()


async def test_every_item_of_a_batch_is_queued_whatever_the_sink_does(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool, three_rules())
    # the first write goes through, the second meets the sink down
    sink = FakeSink()
    fire = await recorded(pool, spec, scheduled_fire())
    assert fire.activity_run_id is not None
    report = await emit(pool, sink, spec, fire)
    assert [item.outcome for item in report.items] == [SpawnOutcome.created] * 3
    assert report.sink_writes_left == 3
    assert len(await ops_runs(db)) == 3

    sink.fail_times = 2  # the sink is down for two tries, then up
    with pytest.raises(SinkUnavailable):
        await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
    # the sink is down: the other writes wait for the next try
    assert sink.attempts == 1
    with pytest.raises(SinkUnavailable):
        await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
    totals = await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
    assert totals == SinkTotals(written=3, failed=0)
    assert [t.source_id for t in sink.published] == ["daily-brief", "second", "third"]
    assert {r["sink_status"] for r in await audit(db)} == {"written"}
    assert len(await ops_runs(db)) == 3


async def test_a_refused_write_fails_at_once_and_the_others_go_on(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool, three_rules())
    sink = FakeSink(refuse={"second"})
    fire = await recorded(pool, spec, scheduled_fire())
    assert fire.activity_run_id is not None
    await emit(pool, sink, spec, fire)
    totals = await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
    assert totals == SinkTotals(written=2, failed=1)
    rows = {r["source_id"]: r for r in await audit(db)}
    assert rows["second"]["sink_status"] == "failed"
    assert rows["second"]["sink_error"] == "refused: HTTP 422"
    assert rows["second"]["sink_payload"] is not None  # kept, to send again
    assert {rows[k]["sink_status"] for k in ("daily-brief", "third")} == {"written"}

    # retried once the sink accepts it: the same keys (duplicates) send the failed write
    sink.refuse = set()
    replay, totals = await fire_through(pool, sink, spec, scheduled_fire(run_id="run-retry"))
    assert {item.outcome for item in replay.items} == {SpawnOutcome.duplicate}
    assert replay.sink_writes_left == 1
    assert totals == SinkTotals(written=3, failed=0)
    assert [t.source_id for t in sink.published] == ["daily-brief", "third", "second"]
    assert len(await ops_runs(db)) == 3


async def test_giving_up_fails_what_is_still_pending_with_its_last_error(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool, three_rules())
    sink = FakeSink(fail_times=1)
    fire = await recorded(pool, spec, scheduled_fire())
    assert fire.activity_run_id is not None
    await emit(pool, sink, spec, fire)
    with pytest.raises(SinkUnavailable):
        await publish_pending(pool, sink, activity_run_id=fire.activity_run_id)
    totals = await give_up(pool, activity_run_id=fire.activity_run_id, reason="window over")
    assert totals == SinkTotals(written=0, failed=3)
    rows = await audit(db)
    assert [r["sink_status"] for r in rows] == ["failed"] * 3
    # the write that was tried says what it met; the others, why they were given up
    assert [r["sink_error"] for r in rows] == ["sink down", "window over", "window over"]
    assert len(await ops_runs(db)) == 3


class SwitchableHub:
    """A State Hub stand-in: 503 while ``down``, else 201, counting accepted writes by key."""

    def __init__(self) -> None:
        self.down = True
        self.refused_once = asyncio.Event()
        self.accepted: dict[str, int] = {}

    def handle(self, request: httpx.Request, *, up: bool = False) -> httpx.Response:
        if self.down and not up:
            self.refused_once.set()
            return httpx.Response(503)
        key = request.headers["Idempotency-Key"]
        self.accepted[key] = self.accepted.get(key, 0) + 1
        return httpx.Response(201, json={"id": f"hub-{key}"})

    def sink(self, *, up: bool = False) -> StateHubSink:
        """A try's sink, retrying for as long as the test needs; ``up``: this try's
        requests are answered even while the hub is down for the others."""
        return StateHubSink(
            STATE_HUB,
            transport=httpx.MockTransport(functools.partial(self.handle, up=up)),
            attempts=10_000,
            backoff_initial=0.005,
            backoff_max=0.02,
        )


@dataclass
class OwedFire:
    """A fire of three rules whose three sink writes are owed, and the hub they go to."""

    hub: SwitchableHub
    sink: StateHubSink
    run_id: uuid.UUID


@pytest.fixture
async def owed_fire(pool: asyncpg.Pool) -> AsyncIterator[OwedFire]:
    [spec] = await synced(pool, three_rules())
    hub = SwitchableHub()
    sink = hub.sink()
    fire = await recorded(pool, spec, scheduled_fire())
    assert fire.activity_run_id is not None
    await emit(pool, sink, spec, fire)
    try:
        yield OwedFire(hub, sink, fire.activity_run_id)
    finally:
        await sink.aclose()


async def test_a_try_still_retrying_when_the_window_ends_sends_nothing_more(
    pool: asyncpg.Pool, db: asyncpg.Connection, owed_fire: OwedFire
) -> None:
    # Temporal's timeout at the end of the retry window does not stop the attempt running
    # on its worker: it must withdraw its writes, or they reach State Hub twice, once from
    # it and once from the operator's retry-fire (CI saw exactly that end to end).
    hub, sink, run_id = owed_fire.hub, owed_fire.sink, owed_fire.run_id
    timed_out_try = asyncio.create_task(publish_pending(pool, sink, activity_run_id=run_id))
    await asyncio.wait_for(hub.refused_once.wait(), timeout=10)
    totals = await give_up(pool, activity_run_id=run_id, reason="window over")
    assert totals == SinkTotals(written=0, failed=3)
    hub.down = False
    # the try stops at its next attempt, sending none of the three writes
    assert await asyncio.wait_for(timed_out_try, timeout=10) == SinkTotals(written=0, failed=3)
    assert hub.accepted == {}
    rows = await audit(db)
    assert [r["sink_status"] for r in rows] == ["failed"] * 3
    assert [r["sink_sender"] for r in rows] == [None] * 3

    # the retry-fire's try sends each write once
    totals = await publish_pending(pool, sink, activity_run_id=run_id)
    assert totals == SinkTotals(written=3, failed=0)
    assert hub.accepted == dict.fromkeys((r["idempotency_key"] for r in rows), 1)


async def test_a_later_try_takes_the_writes_over_and_the_earlier_sends_none_of_them(
    pool: asyncpg.Pool, db: asyncpg.Connection, owed_fire: OwedFire
) -> None:
    hub, run_id = owed_fire.hub, owed_fire.run_id
    earlier = asyncio.create_task(publish_pending(pool, owed_fire.sink, activity_run_id=run_id))
    await asyncio.wait_for(hub.refused_once.wait(), timeout=10)
    later_sink = hub.sink(up=True)
    try:
        later = await publish_pending(pool, later_sink, activity_run_id=run_id)
    finally:
        await later_sink.aclose()
    assert later == SinkTotals(written=3, failed=0)
    hub.down = False  # the earlier try would be answered now
    # it withdrew the writes, whenever the later try had sent them: its totals are of
    # that moment, and it failed none
    assert (await asyncio.wait_for(earlier, timeout=10)).failed == 0
    keys = [r["idempotency_key"] for r in await audit(db)]
    assert hub.accepted == dict.fromkeys(keys, 1)
    # a write the earlier try recorded as not yet sent would have kept its error
    assert [r["sink_error"] for r in await audit(db)] == [None] * 3


async def test_tries_and_a_give_up_of_the_same_writes_at_once_wait_for_each_other(
    pool: asyncpg.Pool, db: asyncpg.Connection, owed_fire: OwedFire
) -> None:
    # each statement that takes a fire's writes locks them in id order: no deadlock,
    # however the tries and the end of the window interleave
    owed_fire.hub.down = False
    run_id = owed_fire.run_id
    for _ in range(5):
        await asyncio.gather(
            *(publish_pending(pool, owed_fire.sink, activity_run_id=run_id) for _ in range(6)),
            give_up(pool, activity_run_id=run_id, reason="window over"),
        )
    rows = await audit(db)
    assert [r["sink_status"] for r in rows] == ["written"] * 3
    assert set(owed_fire.hub.accepted) == {r["idempotency_key"] for r in rows}


# --- queue disabled, report-only, audit links -------------------------------------------------


async def test_queue_disabled_writes_the_sink_and_the_audit_but_no_run(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool)
    sink = FakeSink()
    report, totals = await fire_through(pool, sink, spec, scheduled_fire(), queue_enabled=False)
    assert await ops_runs(db) == []
    [row] = await audit(db)
    assert (row["outcome"], row["ops_run_id"], row["issue_sink_ref"], row["sink_status"]) == (
        "queue_disabled",
        None,
        "ref-1",
        "written",
    )
    [published] = sink.published
    assert published.ops_run_id is None
    assert published.repository_grant == GRANT
    assert report.items[0].outcome is SpawnOutcome.queue_disabled
    assert totals == SinkTotals(written=1, failed=0)


async def test_report_only_instructions_write_the_audit_row_only(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    doc = definition_doc()
    doc["instructions"] = [{"id": "weekly-digest", "report_only": True, "task_template": "Digest"}]
    [spec] = await synced(pool, doc)
    sink = FakeSink()
    report, _ = await fire_through(pool, sink, spec, scheduled_fire(), require_profile=True)
    [run] = await ops_runs(db)
    assert run["source_id"] == "daily-brief"
    rows = await audit(db)
    assert [(r["source_type"], r["source_id"], r["outcome"], r["sink_status"]) for r in rows] == [
        ("rule", "daily-brief", "created", "written"),
        ("instruction", "weekly-digest", "report_only", "none"),
    ]
    assert rows[1]["ops_run_id"] is None
    assert [t.source_id for t in sink.published] == ["daily-brief"]
    assert report.emitted_count == 1


async def test_the_none_sink_owes_no_write(pool: asyncpg.Pool, db: asyncpg.Connection) -> None:
    from activity_core.emission.sink import NoneSink

    [spec] = await synced(pool)
    report = await emit(pool, NoneSink(), spec, scheduled_fire())
    assert report.sink_writes_left == 0
    [row] = await audit(db)
    assert (row["issue_sink"], row["sink_status"], row["sink_payload"]) == ("none", "none", None)


async def test_audit_rows_point_at_the_activity_run(
    pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    [spec] = await synced(pool)
    fire = await recorded(pool, spec, scheduled_fire())
    await emit(pool, FakeSink(), spec, fire)
    [row] = await audit(db)
    assert row["activity_run_id"] == fire.activity_run_id
    assert row["triggering_event_id"] == "scheduled:2026-03-02T05:00:00+00:00"


# --- waking long-poll claimers ----------------------------------------------------------------


async def test_a_waiting_claim_returns_the_emitted_run(api: AppClient, pool: asyncpg.Pool) -> None:
    [spec] = await synced(pool)
    waiting = asyncio.create_task(api.claim(wait_seconds=10))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    await emit(pool, FakeSink(), spec, manual_fire({"correlation_id": "c-9"}))
    response = await asyncio.wait_for(waiting, 5)
    [run] = response.json()["runs"]
    assert run["idempotency_key"] == "fi-daily-brief:daily-brief:manual:1"
    assert run["state"] == "claimed"
    assert run["repository_grant"] == GRANT
    assert run["execution_refs"] == {"correlation_id": "c-9"}
