"""Every peer's answer is read within a bound (adapters/http_client.py): activity-core's,
a remote Glas gateway's and the completion-event sink's, against recorded HTTP (respx)."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx

from ops_contracts import parse_repository_grant
from rein_aharness.adapters.http_client import (
    MAX_ANSWER_BYTES,
    AnswerTooLarge,
    build_http_client,
)
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import QueueProtocolError
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.gateway import GatewayProtocolError, HttpGlasGateway, QueuedRequest
from rein_aharness.profiles import ProfileCatalogue
from rein_aharness.worker.events import HttpEventSink
from rein_worker_kit import CATALOGUE, GRANT, ops_run

BASE = "http://peer.test"
WORKER = "rein-aharness@railiance01"
FAST = RetryPolicy(attempts=3, initial_wait=0, max_wait=0)
CHUNK = 1024 * 1024


class EndlessBody:
    """An answer body far over the bound (it ends at three times the bound, so that a
    client without the bound fails its test instead of reading for ever), counting the
    chunks it was asked for."""

    def __init__(self) -> None:
        self.chunks = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.chunks < 3 * MAX_ANSWER_BYTES // CHUNK:
            self.chunks += 1
            yield b"x" * CHUNK


def endless_answer(body: EndlessBody) -> httpx.Response:
    return httpx.Response(200, content=body, headers={"content-type": "application/json"})


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(base_url=BASE, assert_all_called=False)


def transport(router: respx.MockRouter) -> httpx.MockTransport:
    return httpx.MockTransport(router.async_handler)


def bounded_client(router: respx.MockRouter) -> httpx.AsyncClient:
    return build_http_client(BASE, None, transport=transport(router), timeout_seconds=5)


# -- the client every adapter builds -----------------------------------------------------


async def test_an_answer_within_the_bound_is_read_and_asked_for_unencoded(
    router: respx.MockRouter,
) -> None:
    route = router.get("/small").respond(200, json={"ok": True})
    async with build_http_client(
        BASE, None, transport=transport(router), timeout_seconds=5
    ) as http:
        answer = await http.get("/small")
    assert answer.json() == {"ok": True}
    assert route.calls.last.request.headers["accept-encoding"] == "identity"


async def test_an_endless_answer_is_cut_off_at_the_bound(router: respx.MockRouter) -> None:
    body = EndlessBody()
    router.get("/endless").mock(return_value=endless_answer(body))
    async with build_http_client(
        BASE, None, transport=transport(router), timeout_seconds=5
    ) as http:
        with pytest.raises(AnswerTooLarge, match=str(MAX_ANSWER_BYTES)):
            await http.get("/endless")
    assert body.chunks == MAX_ANSWER_BYTES // CHUNK + 1


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"content-length": str(MAX_ANSWER_BYTES + 1)}, "declares"),
        ({"content-length": "9" * 40}, "declares"),
        ({"content-encoding": "gzip"}, "gzip-encoded"),
        ({"content-encoding": "br"}, "br-encoded"),
    ],
)
async def test_an_answer_declared_too_large_or_encoded_is_refused_unread(
    router: respx.MockRouter, headers: dict[str, str], message: str
) -> None:
    body = EndlessBody()
    router.get("/declared").mock(return_value=httpx.Response(200, content=body, headers=headers))
    async with build_http_client(
        BASE, None, transport=transport(router), timeout_seconds=5
    ) as http:
        with pytest.raises(AnswerTooLarge, match=message):
            await http.get("/declared")
    assert body.chunks == 0


async def test_a_small_compressed_answer_cannot_inflate(router: respx.MockRouter) -> None:
    # 64 MiB of zeros is about 64 KiB gzipped
    bomb = gzip.compress(b"\0" * (2 * MAX_ANSWER_BYTES))
    assert len(bomb) < MAX_ANSWER_BYTES // 100
    router.get("/bomb").respond(200, content=bomb, headers={"content-encoding": "gzip"})
    async with build_http_client(
        BASE, None, transport=transport(router), timeout_seconds=5
    ) as http:
        with pytest.raises(AnswerTooLarge):
            await http.get("/bomb")


# -- each peer ---------------------------------------------------------------------------


async def test_activity_core_answering_too_much_is_a_protocol_error_not_retried(
    router: respx.MockRouter,
) -> None:
    body = EndlessBody()
    route = router.post("/ops-runs/claim").mock(return_value=endless_answer(body))
    async with ActivityCoreQueueClient(
        BASE, "s3cret-token", transport=transport(router), retry=FAST
    ) as queue:
        with pytest.raises(QueueProtocolError, match="answered too much"):
            await queue.claim(WORKER)
    assert route.call_count == 1


async def test_a_gateway_answering_too_much_is_a_protocol_error_not_retried(
    router: respx.MockRouter,
) -> None:
    run = ops_run(harness_profile_ref="harness.brief@1.0.0", repository_grant=GRANT)
    profile = ProfileCatalogue.from_yaml(CATALOGUE).resolve("harness.brief@1.0.0")
    request = QueuedRequest(run, profile, parse_repository_grant(GRANT))
    route = router.post("/v1/requests").mock(return_value=endless_answer(EndlessBody()))
    gateway = HttpGlasGateway(BASE, "glas-token", transport=transport(router), retry=FAST)
    try:
        with pytest.raises(GatewayProtocolError, match="answered too much"):
            await gateway.execute(request)
    finally:
        await gateway.aclose()
    assert route.call_count == 1


def event() -> dict[str, Any]:
    return {"event": "ops_run.succeeded", "event_id": "e-1", "run_id": "e-1"}


async def emit_one_event(router: respx.MockRouter) -> None:
    sink = HttpEventSink(f"{BASE}/events", transport=transport(router), retry=FAST)
    try:
        await sink.emit(event())
    finally:
        await sink.aclose()


async def test_the_event_sink_posts_once_with_its_key(router: respx.MockRouter) -> None:
    route = router.post("/events").respond(202)
    await emit_one_event(router)
    assert route.call_count == 1
    sent = route.calls.last.request
    assert sent.headers["idempotency-key"] == "e-1"
    assert json.loads(sent.content) == event()


@pytest.mark.parametrize("status", [500, 503, 408, 429])
async def test_the_event_sink_retries_a_transient_answer_then_gives_up_with_a_warning(
    router: respx.MockRouter, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    route = router.post("/events").respond(status)
    with caplog.at_level(logging.WARNING):
        await emit_one_event(router)
    assert route.call_count == FAST.attempts
    assert "not delivered" in caplog.text and str(status) in caplog.text


async def test_the_event_sink_answering_too_much_is_a_warning_not_a_retry(
    router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    route = router.post("/events").mock(return_value=endless_answer(EndlessBody()))
    with caplog.at_level(logging.WARNING):
        await emit_one_event(router)
    assert route.call_count == 1
    assert "answer was refused" in caplog.text
