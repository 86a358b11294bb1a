"""The queue client against recorded HTTP (respx): auth, translation, retries."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx

from ops_contracts import (
    CONCLUSIVE_CLOSE_REFUSALS,
    REFUSAL_HTTP_STATUS,
    CloseDisposition,
    RefusalCode,
)
from rein_aharness.adapters.close_delivery import deliver_close
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import (
    CloseRefusedError,
    QueueAuthError,
    QueueProtocolError,
    QueueRefusedError,
    QueueRejectedError,
    QueueTransientError,
    QueueTransportError,
    QueueUnavailableError,
)
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.outbox import OutboxStore

BASE = "http://activity-core.test"
RUN = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
WORKER = "rein-aharness@railiance01"
FAST = RetryPolicy(attempts=3, initial_wait=0, max_wait=0)


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(base_url=BASE, assert_all_called=False)


@pytest.fixture
async def client(router: respx.MockRouter) -> AsyncIterator[ActivityCoreQueueClient]:
    async with ActivityCoreQueueClient(
        BASE, "s3cret-token", transport=httpx.MockTransport(router.async_handler), retry=FAST
    ) as queue:
        yield queue


def _refusal(code: str, status: int | None = None) -> httpx.Response:
    status = status if status is not None else REFUSAL_HTTP_STATUS[RefusalCode(code)]
    return httpx.Response(status, json={"code": code, "detail": "human text"})


def _closed(projection: Callable[..., dict[str, Any]], disposition: str) -> httpx.Response:
    return httpx.Response(
        200, json={**projection(state="succeeded"), "close_disposition": disposition}
    )


def _close_routes(
    router: respx.MockRouter, projection: Callable[..., dict[str, Any]], complete: str, fail: str
) -> tuple[respx.Route, respx.Route]:
    """RUN's complete and fail routes, answering with the dispositions `complete`, `fail`."""
    return (
        router.post(f"/ops-runs/{RUN}/complete").mock(return_value=_closed(projection, complete)),
        router.post(f"/ops-runs/{RUN}/fail").mock(return_value=_closed(projection, fail)),
    )


async def test_every_request_carries_the_worker_bearer_token(
    router: respx.MockRouter, client: ActivityCoreQueueClient, projection: Callable[..., Any]
) -> None:
    route = router.post("/ops-runs/claim").mock(return_value=httpx.Response(200, json={"runs": []}))
    assert await client.claim(WORKER) == []
    request = route.calls.last.request
    assert request.headers["Authorization"] == "Bearer s3cret-token"


async def test_claim_sends_the_documented_body_and_parses_runs(
    router: respx.MockRouter, client: ActivityCoreQueueClient, projection: Callable[..., Any]
) -> None:
    route = router.post("/ops-runs/claim").mock(
        return_value=httpx.Response(200, json={"runs": [projection(), projection(RUN[:-1] + "0")]})
    )
    runs = await client.claim(
        WORKER, labels=["automated"], labels_mode="all", limit=2, lease_seconds=900, wait_seconds=5
    )
    assert [str(run.id) for run in runs] == [RUN, RUN[:-1] + "0"]
    assert json.loads(route.calls.last.request.content) == {
        "worker_id": WORKER,
        "labels": ["automated"],
        "labels_mode": "all",
        "limit": 2,
        "lease_seconds": 900,
        "wait_seconds": 5,
    }


async def test_claim_without_labels_omits_them(
    router: respx.MockRouter, client: ActivityCoreQueueClient
) -> None:
    route = router.post("/ops-runs/claim").mock(return_value=httpx.Response(200, json={"runs": []}))
    await client.claim(WORKER)
    body = json.loads(route.calls.last.request.content)
    assert body == {"worker_id": WORKER, "labels_mode": "any", "limit": 1, "wait_seconds": 0}


async def test_heartbeat_extends_the_lease(
    router: respx.MockRouter, client: ActivityCoreQueueClient, projection: Callable[..., Any]
) -> None:
    route = router.post(f"/ops-runs/{RUN}/heartbeat").mock(
        return_value=httpx.Response(200, json=projection())
    )
    run = await client.heartbeat(RUN, WORKER, lease_seconds=600, attempt=2)
    assert str(run.id) == RUN
    assert json.loads(route.calls.last.request.content) == {
        "worker_id": WORKER,
        "lease_seconds": 600,
        "attempt": 2,
    }


@pytest.mark.parametrize("code", ["expired_lease", "wrong_owner", "state_conflict", "not_found"])
async def test_heartbeat_refusals_are_typed_and_not_retried(
    router: respx.MockRouter, client: ActivityCoreQueueClient, code: str
) -> None:
    route = router.post(f"/ops-runs/{RUN}/heartbeat").mock(return_value=_refusal(code))
    with pytest.raises(QueueRefusedError) as caught:
        await client.heartbeat(RUN, WORKER, attempt=1)
    assert caught.value.code == code
    assert route.call_count == 1


async def test_complete_and_fail_return_the_disposition(
    router: respx.MockRouter, client: ActivityCoreQueueClient, projection: Callable[..., Any]
) -> None:
    complete, fail = _close_routes(router, projection, "applied", "reopened")
    done = await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert done.close_disposition is CloseDisposition.applied
    failed = await client.fail(RUN, WORKER, "llm timeout", reopen=True, attempt=3)
    assert failed.close_disposition is CloseDisposition.reopened
    assert json.loads(complete.calls.last.request.content) == {
        "worker_id": WORKER,
        "result": {"ok": True},
        "attempt": 1,
    }
    assert json.loads(fail.calls.last.request.content) == {
        "worker_id": WORKER,
        "error": "llm timeout",
        "reopen": True,
        "attempt": 3,
    }


async def test_a_close_without_a_known_attempt_is_sent_without_one(
    router: respx.MockRouter, client: ActivityCoreQueueClient, projection: Callable[..., Any]
) -> None:
    """Only for an outbox record that never knew its attempt (see close_delivery)."""
    complete, fail = _close_routes(router, projection, "applied", "applied")
    await client.complete(RUN, WORKER, {"ok": True}, attempt=None)
    await client.fail(RUN, WORKER, "boom", attempt=None)
    assert "attempt" not in json.loads(complete.calls.last.request.content)
    assert "attempt" not in json.loads(fail.calls.last.request.content)


@pytest.mark.parametrize("attempt", [0, -1])
async def test_a_claimed_run_without_a_valid_attempt_is_a_protocol_error(
    router: respx.MockRouter,
    client: ActivityCoreQueueClient,
    projection: Callable[..., Any],
    attempt: int,
) -> None:
    """Nothing done under it could be fenced: the claim is not the documented answer."""
    router.post("/ops-runs/claim").mock(
        return_value=httpx.Response(200, json={"runs": [projection(attempt=attempt)]})
    )
    with pytest.raises(QueueProtocolError, match="without a valid attempt"):
        await client.claim(WORKER)


@pytest.mark.parametrize("code", sorted(CONCLUSIVE_CLOSE_REFUSALS))
@pytest.mark.parametrize("action", ["complete", "fail"])
async def test_conclusive_close_refusals_raise_close_refused_without_retry(
    router: respx.MockRouter, client: ActivityCoreQueueClient, code: RefusalCode, action: str
) -> None:
    route = router.post(f"/ops-runs/{RUN}/{action}").mock(return_value=_refusal(code.value))
    with pytest.raises(CloseRefusedError) as caught:
        if action == "complete":
            await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
        else:
            await client.fail(RUN, WORKER, "boom", attempt=1)
    assert caught.value.code is code
    assert route.call_count == 1
    assert caught.value.cancelled_by_operator is False


@pytest.mark.parametrize(
    ("code", "detail", "cancelled"),
    [
        ("terminal_conflict", "the run was cancelled by operator alice", True),
        ("terminal_conflict", "the run is already failed with a different close", False),
        ("terminal_conflict", "the run is already succeeded and has no recorded close", False),
        # only a close's terminal_conflict: another code saying so is what its code says
        ("state_conflict", "the run was cancelled by operator alice", False),
        ("expired_lease", "the run was cancelled by operator alice", False),
    ],
)
async def test_only_a_terminal_conflict_for_an_operator_cancel_is_marked_cancelled(
    router: respx.MockRouter,
    client: ActivityCoreQueueClient,
    code: str,
    detail: str,
    cancelled: bool,
) -> None:
    status = REFUSAL_HTTP_STATUS[RefusalCode(code)]
    router.post(f"/ops-runs/{RUN}/complete").mock(
        return_value=httpx.Response(status, json={"code": code, "detail": detail})
    )
    with pytest.raises(CloseRefusedError) as caught:
        await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert (caught.value.code.value, caught.value.cancelled_by_operator) == (code, cancelled)


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(503, json={"code": "unavailable", "detail": "x"}),
        httpx.Response(500, text="<html>oops</html>"),
        httpx.Response(502, json={"code": "not_found", "detail": "proxy"}),
    ],
)
async def test_5xx_is_retried_then_raised_as_transient(
    router: respx.MockRouter, client: ActivityCoreQueueClient, response: httpx.Response
) -> None:
    route = router.post(f"/ops-runs/{RUN}/complete").mock(return_value=response)
    with pytest.raises(QueueUnavailableError) as caught:
        await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert isinstance(caught.value, QueueTransientError)
    assert route.call_count == FAST.attempts


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("x")],
)
async def test_transport_errors_are_retried_then_raised_as_transient(
    router: respx.MockRouter, client: ActivityCoreQueueClient, error: Exception
) -> None:
    route = router.post(f"/ops-runs/{RUN}/complete").mock(side_effect=error)
    with pytest.raises(QueueTransportError):
        await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert route.call_count == FAST.attempts


async def test_a_transient_failure_followed_by_success_succeeds(
    router: respx.MockRouter, client: ActivityCoreQueueClient, projection: Callable[..., Any]
) -> None:
    route = router.post(f"/ops-runs/{RUN}/complete").mock(
        side_effect=[
            httpx.ConnectError("refused"),
            httpx.Response(503, json={"code": "x", "detail": "y"}),
            _closed(projection, "reconciled"),
        ]
    )
    response = await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert response.close_disposition is CloseDisposition.reconciled
    assert route.call_count == 3


def _retry_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The queue client's retry records, as the fields their log line carries."""
    return [
        {
            "level": record.levelname,
            "message": record.getMessage(),
            **{
                key: getattr(record, key, None)
                for key in ("request", "run_id", "request_attempt", "reason")
            },
        }
        for record in caplog.records
        if record.name == "rein_aharness.adapters.queue_client"
    ]


async def test_a_retried_request_logs_one_warning_line_per_retry(
    router: respx.MockRouter,
    client: ActivityCoreQueueClient,
    projection: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    router.post(f"/ops-runs/{RUN}/heartbeat").mock(
        side_effect=[
            httpx.ConnectError("refused"),
            httpx.Response(503, json={"code": "unavailable", "detail": "SECRET detail"}),
            httpx.Response(200, json=projection()),
        ]
    )
    caplog.set_level(logging.INFO, logger="rein_aharness")
    await client.heartbeat(RUN, WORKER, attempt=1)
    assert _retry_lines(caplog) == [
        {
            "level": "WARNING",
            "message": "queue request retried",
            "request": "POST /ops-runs/{id}/heartbeat",
            "run_id": RUN,
            "request_attempt": 1,
            "reason": "activity-core unreachable: ConnectError",
        },
        {
            "level": "WARNING",
            "message": "queue request retried",
            "request": "POST /ops-runs/{id}/heartbeat",
            "run_id": RUN,
            "request_attempt": 2,
            "reason": "activity-core answered 503 unavailable",
        },
    ]
    assert "SECRET" not in caplog.text and "s3cret-token" not in caplog.text


async def test_retries_of_a_claim_and_a_changes_upload_are_logged_by_their_kind(
    router: respx.MockRouter, client: ActivityCoreQueueClient, caplog: pytest.LogCaptureFixture
) -> None:
    router.post("/ops-runs/claim").mock(
        side_effect=[httpx.ReadTimeout("slow"), httpx.Response(200, json={"runs": []})]
    )
    router.put(f"/ops-runs/{RUN}/changes").mock(side_effect=httpx.ConnectError("refused"))
    caplog.set_level(logging.INFO, logger="rein_aharness")
    await client.claim(WORKER)
    with pytest.raises(QueueTransportError):
        await client.put_changes(RUN, WORKER, b"bundle", "sha256:x", attempt=1)
    assert [
        (line["request"], line["run_id"], line["request_attempt"]) for line in _retry_lines(caplog)
    ] == [
        ("POST /ops-runs/claim", None, 1),
        # the last attempt is not retried: it raises, and says so itself
        *[("PUT /ops-runs/{id}/changes", RUN, n) for n in range(1, FAST.attempts)],
    ]


async def test_a_request_that_is_not_retried_logs_nothing(
    router: respx.MockRouter, client: ActivityCoreQueueClient, caplog: pytest.LogCaptureFixture
) -> None:
    router.post(f"/ops-runs/{RUN}/complete").mock(return_value=_refusal("expired_lease"))
    caplog.set_level(logging.INFO, logger="rein_aharness")
    with pytest.raises(CloseRefusedError):
        await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert _retry_lines(caplog) == []


@pytest.mark.parametrize(
    ("status", "code"),
    [(401, "unauthenticated"), (403, "forbidden"), (403, "worker_identity_mismatch"), (401, None)],
)
async def test_auth_failures_are_typed_and_never_retried(
    router: respx.MockRouter, client: ActivityCoreQueueClient, status: int, code: str | None
) -> None:
    body = {"code": code, "detail": "no"} if code else None
    route = router.post(f"/ops-runs/{RUN}/complete").mock(
        return_value=httpx.Response(status, json=body)
    )
    with pytest.raises(QueueAuthError) as caught:
        await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert caught.value.status == status
    assert route.call_count == 1


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(422, json={"code": "invalid_request", "detail": "x", "errors": []}),
        httpx.Response(413, json={"code": "request_too_large", "detail": "x"}),
        httpx.Response(404, text="<html>no such path</html>"),  # a proxy, not Activity Core
        httpx.Response(404, json={"code": "terminal_conflict", "detail": "wrong status"}),
        httpx.Response(409, json={"code": "something_new", "detail": "x"}),
        httpx.Response(418, json=["not", "an", "object"]),
    ],
)
async def test_unclassified_rejections_are_neither_conclusive_nor_retried(
    router: respx.MockRouter, client: ActivityCoreQueueClient, response: httpx.Response
) -> None:
    route = router.post(f"/ops-runs/{RUN}/complete").mock(return_value=response)
    with pytest.raises(QueueRejectedError):
        await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert route.call_count == 1


async def test_a_2xx_with_an_unexpected_body_is_a_protocol_error(
    router: respx.MockRouter, client: ActivityCoreQueueClient, projection: Callable[..., Any]
) -> None:
    router.post(f"/ops-runs/{RUN}/complete").mock(
        return_value=httpx.Response(200, json=projection())  # no close_disposition
    )
    with pytest.raises(QueueProtocolError):
        await client.complete(RUN, WORKER, {"ok": True}, attempt=1)


async def test_error_messages_carry_no_server_detail(
    router: respx.MockRouter, client: ActivityCoreQueueClient
) -> None:
    router.post(f"/ops-runs/{RUN}/complete").mock(
        return_value=httpx.Response(422, json={"code": "invalid_request", "detail": "SECRET"})
    )
    with pytest.raises(QueueRejectedError) as caught:
        await client.complete(RUN, WORKER, {"ok": True}, attempt=1)
    assert "SECRET" not in str(caught.value)
    assert "422" in str(caught.value) and "invalid_request" in str(caught.value)


async def test_without_a_token_no_authorization_header_is_sent(router: respx.MockRouter) -> None:
    route = router.post("/ops-runs/claim").mock(return_value=httpx.Response(200, json={"runs": []}))
    async with ActivityCoreQueueClient(
        BASE, None, transport=httpx.MockTransport(router.async_handler), retry=FAST
    ) as client:
        await client.claim(WORKER)
    assert "Authorization" not in route.calls.last.request.headers


async def test_run_ids_are_path_quoted(
    router: respx.MockRouter, client: ActivityCoreQueueClient, projection: Callable[..., Any]
) -> None:
    route = router.post(url__regex=r".*/ops-runs/a%2Fb/complete$").mock(
        return_value=_closed(projection, "applied")
    )
    await client.complete("a/b", WORKER, {"ok": True}, attempt=1)
    assert route.called


def test_retry_policy_is_bounded() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(initial_wait=-1)
    assert RetryPolicy().attempts >= 2


# -- deliver_close: the outbox's callback --------------------------------------------------


async def test_deliver_close_sends_exactly_the_stored_intent(
    router: respx.MockRouter,
    client: ActivityCoreQueueClient,
    projection: Callable[..., Any],
    store: OutboxStore,
    make_close: Callable[..., dict[str, Any]],
    make_fail: Callable[..., dict[str, Any]],
) -> None:
    complete = router.post(f"/ops-runs/{RUN}/complete").mock(
        return_value=_closed(projection, "applied")
    )
    fail = router.post("/ops-runs/failed-run/fail").mock(
        return_value=_closed(projection, "reopened")
    )
    done = store.enqueue_close(
        **make_close(result={"ok": True, "tool_output": "dropped"}, attempt=3)
    )
    failed = store.enqueue_close(
        **make_fail(run_id="failed-run", reopen=True, result={"ok": False}, error="x\ny")
    )
    deliver = deliver_close(client)
    assert await deliver(done.record) is CloseDisposition.applied
    assert await deliver(failed.record) is CloseDisposition.reopened
    assert json.loads(complete.calls.last.request.content) == {
        "worker_id": "rein-aharness@railiance01",
        "result": {"ok": True},
        "attempt": 3,
    }
    # its transaction id is not the worker's rtx- shape and it was given no attempt
    assert failed.record.attempt is None
    assert json.loads(fail.calls.last.request.content) == {
        "worker_id": "rein-aharness@railiance01",
        "error": "x y",
        "reopen": True,
        "result": {"ok": False},
    }
    assert {call.request.url.path for call in router.calls} == {
        f"/ops-runs/{RUN}/complete",
        "/ops-runs/failed-run/fail",
    }


async def test_a_close_whose_response_was_lost_is_replayed_to_reconciled(
    router: respx.MockRouter,
    client: ActivityCoreQueueClient,
    projection: Callable[..., Any],
    store: OutboxStore,
    make_close: Callable[..., dict[str, Any]],
) -> None:
    """Activity Core applied the close but every response timed out: the entry stays
    pending, and the next replay repeats only the queue request and reconciles."""
    from rein_aharness.outbox import replay_pending

    key = store.enqueue_close(**make_close()).record.key
    route = router.post(f"/ops-runs/{RUN}/complete").mock(side_effect=httpx.ReadTimeout("lost"))
    first = await replay_pending(store, deliver_close(client))
    assert first.count("failed") == 1
    assert (store.paths.pending / f"{key}.json").exists()
    route.mock(side_effect=None, return_value=_closed(projection, "reconciled"))
    second = await replay_pending(store, deliver_close(client))
    assert [outcome.detail for outcome in second.outcomes] == ["reconciled"]
    delivered = json.loads((store.paths.delivered / f"{key}.json").read_bytes())
    assert delivered["disposition"] == "reconciled"
    assert delivered["attempts"] == 2
    bodies = {call.request.content for call in route.calls}
    assert len(bodies) == 1  # every request was the exact same normalized intent
    assert route.call_count == FAST.attempts + 1
