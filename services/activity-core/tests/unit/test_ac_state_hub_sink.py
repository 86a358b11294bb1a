"""The State Hub IssueSink against recorded HTTP (respx): retries, refusals, settings."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest
import respx

from activity_core.emission.errors import IssueSinkError, SinkWriteWithdrawn
from activity_core.emission.sink import NoneSink, SinkTask, StateHubSink, build_issue_sink
from activity_core.settings import SettingsError, load_settings

BASE = "http://state-hub.test"


def task(key: str = "fi-daily-brief:daily-brief:scheduled:2026-03-02T05:00:00+00:00") -> SinkTask:
    return SinkTask(
        idempotency_key=key,
        activity_id="fi-daily-brief",
        activity_definition_id=uuid.uuid4(),
        activity_run_id=None,
        run_id="run-1",
        source_type="rule",
        source_id="daily-brief",
        triggering_event_id="scheduled:2026-03-02T05:00:00+00:00",
        ops_run_id=uuid.uuid4(),
        title="Research brief for 2026-03-02",
        description="",
        target_repo="research/briefs",
        labels=["automated"],
        priority="medium",
        harness_profile_ref="harness.agent-dev@1.0.0",
        approach_hint=None,
        execution_refs={"correlation_id": "c-1"},
        repository_grant={
            "version": "1",
            "allowed_paths": ["briefs/"],
            "commit_count": {"min": 1, "max": 1},
            "publish": False,
        },
    )


@pytest.fixture
async def sink() -> AsyncIterator[StateHubSink]:
    hub = StateHubSink(BASE, attempts=4, backoff_initial=0, backoff_max=0)
    try:
        yield hub
    finally:
        await hub.aclose()


@respx.mock
async def test_a_task_is_posted_with_its_idempotency_key(sink: StateHubSink) -> None:
    route = respx.post(f"{BASE}/progress").mock(
        return_value=httpx.Response(201, json={"id": "progress-7"})
    )
    sent = task()
    assert await sink.publish(sent) == "progress-7"
    request = route.calls.last.request
    assert request.headers["Idempotency-Key"] == sent.idempotency_key
    body = json.loads(request.content)
    assert body["kind"] == "activity_core.task_emitted"
    assert body["ops_run_id"] == str(sent.ops_run_id)
    assert body["repository_grant"] == sent.repository_grant
    assert body["execution_refs"] == {"correlation_id": "c-1"}


@respx.mock
async def test_5xx_is_retried_until_it_succeeds(sink: StateHubSink) -> None:
    route = respx.post(f"{BASE}/progress").mock(
        side_effect=[httpx.Response(503), httpx.Response(502), httpx.Response(200, json={})]
    )
    assert await sink.publish(task()) is None
    assert route.call_count == 3
    keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
    assert len(keys) == 1


@respx.mock
async def test_transport_errors_are_retried(sink: StateHubSink) -> None:
    route = respx.post(f"{BASE}/progress").mock(
        side_effect=[httpx.ConnectError("refused"), httpx.Response(200, json={"id": 9})]
    )
    assert await sink.publish(task()) == "9"
    assert route.call_count == 2


@respx.mock
async def test_retries_are_bounded_and_end_in_issue_sink_error(sink: StateHubSink) -> None:
    route = respx.post(f"{BASE}/progress").mock(return_value=httpx.Response(503))
    with pytest.raises(IssueSinkError, match="after 4 attempts") as caught:
        await sink.publish(task())
    assert caught.value.status == 503
    assert not caught.value.conclusive  # the sink is down: the write is tried again later
    assert route.call_count == 4


@respx.mock
async def test_a_write_no_longer_owed_is_withdrawn_before_its_next_attempt(
    sink: StateHubSink,
) -> None:
    route = respx.post(f"{BASE}/progress").mock(
        side_effect=[httpx.Response(503), httpx.Response(201, json={"id": "p-1"})]
    )
    answers = iter([True, False])

    async def still_owed() -> bool:
        return next(answers)

    with pytest.raises(SinkWriteWithdrawn, match="withdrawn"):
        await sink.publish(task(), still_owed=still_owed)
    assert route.call_count == 1  # the second attempt, which would succeed, is not made


@respx.mock
async def test_a_write_owed_throughout_is_sent_as_without_the_question(sink: StateHubSink) -> None:
    route = respx.post(f"{BASE}/progress").mock(
        side_effect=[httpx.Response(503), httpx.Response(201, json={"id": "p-1"})]
    )
    asked = 0

    async def still_owed() -> bool:
        nonlocal asked
        asked += 1
        return True

    assert await sink.publish(task(), still_owed=still_owed) == "p-1"
    assert (route.call_count, asked) == (2, 2)  # asked before every attempt


@pytest.mark.parametrize("status", [408, 429])
@respx.mock
async def test_timeout_and_too_many_requests_are_retried_like_a_5xx(
    sink: StateHubSink, status: int
) -> None:
    route = respx.post(f"{BASE}/progress").mock(
        side_effect=[httpx.Response(status), httpx.Response(201, json={"id": "p-1"})]
    )
    assert await sink.publish(task()) == "p-1"
    assert route.call_count == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
@respx.mock
async def test_a_4xx_is_conclusive_and_not_retried(sink: StateHubSink, status: int) -> None:
    route = respx.post(f"{BASE}/progress").mock(return_value=httpx.Response(status))
    with pytest.raises(IssueSinkError, match=f"HTTP {status}") as caught:
        await sink.publish(task())
    assert caught.value.status == status
    assert caught.value.conclusive  # refused: recorded as failed, not retried
    assert route.call_count == 1


def test_a_task_comes_back_whole_from_its_stored_payload() -> None:
    # a pending sink write stores the payload; the retry sends the task it describes
    sent = task()
    assert SinkTask.from_payload(sent.payload()) == sent
    queue_off = replace(sent, ops_run_id=None, activity_run_id=uuid.uuid4(), repository_grant=None)
    assert SinkTask.from_payload(queue_off.payload()) == queue_off


async def test_the_transport_is_injectable() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "x"})

    hub = StateHubSink(BASE, transport=httpx.MockTransport(handler))
    try:
        assert await hub.publish(task()) == "x"
    finally:
        await hub.aclose()
    assert str(seen[0].url) == f"{BASE}/progress"


async def test_the_none_sink_writes_nothing() -> None:
    sink = NoneSink()
    assert sink.name == "none"
    assert await sink.publish(task()) is None


def test_state_hub_is_the_default_and_needs_its_url() -> None:
    with pytest.raises(SettingsError, match=r"^STATE_HUB_URL: required"):
        build_issue_sink(load_settings(STATE_HUB_URL=None))


@pytest.mark.parametrize("url", ["ftp://hub", "not a url", "http://"])
def test_a_bad_state_hub_url_names_the_variable(url: str) -> None:
    with pytest.raises(SettingsError, match=r"^STATE_HUB_URL: must be"):
        build_issue_sink(load_settings(STATE_HUB_URL=url))


async def test_the_factory_builds_each_sink() -> None:
    none = build_issue_sink(load_settings(ACTIVITY_CORE_ISSUE_SINK="none"))
    assert isinstance(none, NoneSink)
    hub = build_issue_sink(load_settings(STATE_HUB_URL=BASE))
    assert isinstance(hub, StateHubSink)
    assert hub.name == "state-hub"
    await hub.aclose()


def test_an_unknown_sink_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="ACTIVITY_CORE_ISSUE_SINK"):
        load_settings(ACTIVITY_CORE_ISSUE_SINK="jira")
