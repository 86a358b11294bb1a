"""Emission's pure decisions: the per-fire event id, rendering, and the batch policy."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from activity_core.definitions.model import ActionFields, ActivityDefinitionSpec
from activity_core.emission.errors import EmissionPolicyError
from activity_core.emission.fire import FireContext
from activity_core.emission.policy import check_batch
from activity_core.emission.render import (
    RenderError,
    render_task,
    render_template,
    resolve_execution_refs,
)
from activity_core.emission.trigger import emit_triggering_event_id
from ops_contracts import ATTRIBUTION_REF_KEYS

# --- emit_triggering_event_id -----------------------------------------------------------------

MONDAY = datetime(2026, 3, 2, 5, 0, tzinfo=UTC)  # 06:00 Berlin
TUESDAY = MONDAY + timedelta(days=1)


def test_scheduled_fires_are_identified_by_their_time_in_utc() -> None:
    assert (
        emit_triggering_event_id("scheduled", MONDAY, "run-1")
        == "scheduled:2026-03-02T05:00:00+00:00"
    )


def test_regression_consecutive_scheduled_fires_get_different_event_ids() -> None:
    """The spec's bug: bare `scheduled` made every weekday share the first day's key."""
    monday = emit_triggering_event_id("scheduled", MONDAY, "run-1")
    tuesday = emit_triggering_event_id("scheduled", TUESDAY, "run-2")
    assert monday != tuesday
    assert "scheduled" not in (monday, tuesday)
    # the same fire (a Temporal retry or replay, a new run id) keeps its id
    assert emit_triggering_event_id("scheduled", MONDAY, "run-1-retry") == monday


def test_a_scheduled_time_in_another_zone_names_the_same_fire() -> None:
    berlin = MONDAY.astimezone(timezone(timedelta(hours=1)))
    assert emit_triggering_event_id("scheduled", berlin, "r") == emit_triggering_event_id(
        "scheduled", MONDAY, "r"
    )
    naive = MONDAY.replace(tzinfo=None)
    assert emit_triggering_event_id("scheduled", naive, "r") == emit_triggering_event_id(
        "scheduled", MONDAY, "r"
    )


def test_an_unknown_scheduled_time_falls_back_to_the_run_id_never_bare_scheduled() -> None:
    assert emit_triggering_event_id("scheduled", None, "run-abc") == "run-abc"
    for bad_run_id in ("", "scheduled"):
        with pytest.raises(ValueError):
            emit_triggering_event_id("scheduled", None, bad_run_id)


def test_other_trigger_keys_pass_through() -> None:
    assert emit_triggering_event_id("manual:8d1c", None, "run-1") == "manual:8d1c"
    assert emit_triggering_event_id("manual:8d1c", MONDAY, "run-1") == "manual:8d1c"
    with pytest.raises(ValueError):
        emit_triggering_event_id("", MONDAY, "run-1")


# --- rendering --------------------------------------------------------------------------------


def fire(**overrides: Any) -> FireContext:
    values: dict[str, Any] = {
        "activity_run_id": None,
        "run_id": "run-1",
        "trigger_key": "manual:1",
        "triggering_event_id": "manual:1",
        "scheduled_for": None,
        "fired_at": datetime(2026, 3, 2, 23, 30, tzinfo=UTC),
        "context": {},
    }
    values.update(overrides)
    return FireContext(**values)


def values(**context: Any) -> dict[str, Any]:
    return {
        "scheduled_for": MONDAY,
        "fired_at": MONDAY,
        "activity_id": "fi-daily-brief",
        "context": context,
    }


def test_templates_render_datetimes_with_their_spec() -> None:
    assert render_template("Brief for {scheduled_for:%Y-%m-%d}", values()) == "Brief for 2026-03-02"
    assert render_template("{activity_id}/{fired_at:%H:%M}", values()) == "fi-daily-brief/05:00"


def test_templates_resolve_context_paths_and_leave_unresolved_ones_empty() -> None:
    ctx = {"request": {"title": "Rates", "nested": {"n": 3}, "none": None}}
    assert render_template("{context.request.title}!", values(**ctx)) == "Rates!"
    assert render_template("n={context.request.nested.n:03d}", values(**ctx)) == "n=003"
    assert render_template("[{context.request.missing}]", values(**ctx)) == "[]"
    assert render_template("[{context.request.none}]", values(**ctx)) == "[]"
    assert render_template("[{context.schedule.x}]", values(**ctx)) == "[]"
    assert render_template("{{literal}}", values()) == "{literal}"


def test_a_spec_that_does_not_fit_the_value_is_a_render_error() -> None:
    with pytest.raises(RenderError, match="does not fit"):
        render_template("{context.request.title:d}", values(request={"title": "x"}))


def test_scheduled_for_renders_in_the_schedule_zone_and_falls_back_to_fired_at() -> None:
    action = ActionFields(task_template="Brief {scheduled_for:%Y-%m-%d %H:%M}", target_repo="a/b")
    late = fire(scheduled_for=datetime(2026, 3, 2, 23, 30, tzinfo=UTC))
    berlin = render_task(action, activity_id="a", title="T", fire=late, timezone="Europe/Berlin")
    assert berlin.title == "Brief 2026-03-03 00:30"
    utc = render_task(action, activity_id="a", title="T", fire=late, timezone=None)
    assert utc.title == "Brief 2026-03-02 23:30"
    manual = render_task(action, activity_id="a", title="T", fire=fire(), timezone=None)
    assert manual.title == "Brief 2026-03-02 23:30"


def test_an_empty_rendered_title_falls_back_to_the_definition_title() -> None:
    action = ActionFields(task_template="{context.request.topic}", target_repo="a/b")
    task = render_task(action, activity_id="a", title="Docs", fire=fire(), timezone=None)
    assert task.title == "Docs"


def test_execution_refs_resolve_and_unresolved_keys_are_absent() -> None:
    refs = {
        "correlation_id": "context.request.correlation_id",
        "causation_id": "context.request.missing",
        "goal_refs": ["context.request.goal_ref", "context.request.more_goals"],
        "initiative_refs": ["context.request.nothing"],
        "request_ref": "context.request.number",
    }
    ctx = {
        "request": {
            "correlation_id": "corr-1",
            "goal_ref": "goal-1",
            "more_goals": ["goal-2", 5, "goal-1"],
            "number": 42,
        }
    }
    assert resolve_execution_refs(refs, values(**ctx)) == {
        "correlation_id": "corr-1",
        "goal_refs": ["goal-1", "goal-2"],
        "request_ref": "42",
    }


def test_only_attribution_keys_are_carried() -> None:
    refs = {"correlation_id": "context.request.c", "token": "context.request.token"}
    ctx = {"request": {"c": "corr", "token": "secret"}}
    resolved = resolve_execution_refs(refs, values(**ctx))
    assert resolved == {"correlation_id": "corr"}
    assert set(resolved) <= set(ATTRIBUTION_REF_KEYS)


def test_non_identifier_values_do_not_become_refs() -> None:
    refs = {"correlation_id": "context.request.c", "causation_id": "context.request.d"}
    ctx = {"request": {"c": {"nested": "x"}, "d": True}}
    assert resolve_execution_refs(refs, values(**ctx)) == {}
    assert (
        resolve_execution_refs(
            {"correlation_id": "context.request.c"}, values(request={"c": "x" * 600})
        )
        == {}
    )


def test_rendered_text_and_refs_are_storable() -> None:
    action = ActionFields(
        task_template="T {context.request.t}",
        description_template="D {context.request.d}",
        target_repo="a/b",
        execution_refs={"correlation_id": "context.request.c", "causation_id": "context.request.d"},
    )
    request = {"t": "a\x00b", "d": "x\ud800y", "c": "ok-1"}
    task = render_task(
        action, activity_id="a", title="T", fire=fire(context={"request": request}), timezone=None
    )
    assert task.title == "T ab"
    assert task.description == "D x\ufffdy"
    assert task.execution_refs == {"correlation_id": "ok-1"}
    bad_ref = {"correlation_id": "context.request.c"}
    assert resolve_execution_refs(bad_ref, values(request={"c": "a\nb"})) == {}


# --- the batch policy -------------------------------------------------------------------------


GRANT = {
    "version": "1",
    "allowed_paths": ["briefs/"],
    "commit_count": {"min": 1, "max": 1},
    "publish": False,
}


def spec(*rules: dict[str, Any], instructions: list[dict[str, Any]] | None = None) -> Any:
    return ActivityDefinitionSpec.model_validate(
        {
            "id": "fi-daily-brief",
            "title": "FI daily brief",
            "rules": [{"id": f"r{i}", "action": action} for i, action in enumerate(rules)],
            "instructions": instructions or [],
        }
    )


def action(**fields: Any) -> dict[str, Any]:
    base = {
        "task_template": "Brief",
        "target_repo": "research/briefs",
        "harness_profile_ref": "harness.agent-dev@1.0.0",
        "repository_grant": GRANT,
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def test_a_good_batch_passes() -> None:
    sources = check_batch(spec(action(), action()), fire=fire(), require_profile=True)
    assert [s.source_id for s in sources] == ["r0", "r1"]


def test_the_required_profile_refuses_the_batch_listing_every_item() -> None:
    batch = spec(action(), action(harness_profile_ref=None), action(harness_profile_ref=None))
    check_batch(batch, fire=fire(), require_profile=False)
    with pytest.raises(EmissionPolicyError) as caught:
        check_batch(batch, fire=fire(), require_profile=True)
    assert [p.field_path for p in caught.value.problems] == [
        "rules[1].action.harness_profile_ref",
        "rules[2].action.harness_profile_ref",
    ]


def test_report_only_instructions_are_exempt_at_emission() -> None:
    batch = spec(instructions=[{"id": "digest", "report_only": True}])
    check_batch(batch, fire=fire(), require_profile=True)


def test_approach_hint_does_not_satisfy_the_policy() -> None:
    batch = spec(action(harness_profile_ref=None, approach_hint="legacy"))
    with pytest.raises(EmissionPolicyError, match="approach_hint does not substitute"):
        check_batch(batch, fire=fire(), require_profile=True)


def test_a_spec_built_around_validation_is_still_refused() -> None:
    """A stored definition from an older build: refs and grants are checked again."""
    good = spec(action())
    bad_action = good.rules[0].action.model_copy(
        update={
            "harness_profile_ref": "harness.agent-dev",
            "execution_refs": {"secret": "context.request.x"},
        }
    )
    bad_rule = good.rules[0].model_copy(update={"action": bad_action})
    bad = good.model_copy(update={"rules": (bad_rule,)})
    with pytest.raises(EmissionPolicyError) as caught:
        check_batch(bad, fire=fire(), require_profile=False)
    assert [p.field_path for p in caught.value.problems] == [
        "rules[0].action.harness_profile_ref",
        "rules[0].action.execution_refs.secret",
    ]


@pytest.mark.parametrize("event_id", ["", "scheduled"])
def test_a_fire_without_a_per_fire_event_id_is_refused(event_id: str) -> None:
    with pytest.raises(EmissionPolicyError, match="per-fire"):
        check_batch(spec(action()), fire=fire(triggering_event_id=event_id), require_profile=False)


def test_definition_uuid_is_stable() -> None:
    assert spec(action()).uuid == uuid.uuid5(
        uuid.UUID("431095a1-708a-517b-9e08-011b3cc4b7a8"), "fi-daily-brief"
    )
