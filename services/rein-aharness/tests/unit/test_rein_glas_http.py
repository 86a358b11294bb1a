"""The remote Glas gateway against recorded HTTP (respx)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx

from ops_contracts import OpsRun, parse_repository_grant
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.gateway import (
    GatewayProtocolError,
    GatewayRefused,
    GatewayUnavailable,
    HttpGlasGateway,
    QueuedRequest,
)
from rein_aharness.profiles import ProfileCatalogue
from rein_worker_kit import CATALOGUE, GRANT, ops_run

BASE = "http://glas.test"
FAST = RetryPolicy(attempts=3, initial_wait=0, max_wait=0)


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(base_url=BASE, assert_all_called=False)


@pytest.fixture
async def gateway(router: respx.MockRouter) -> AsyncIterator[HttpGlasGateway]:
    glas = HttpGlasGateway(
        BASE, "glas-token", transport=httpx.MockTransport(router.async_handler), retry=FAST
    )
    yield glas
    await glas.aclose()


@pytest.fixture
def request_() -> QueuedRequest:
    run: OpsRun = ops_run(
        harness_profile_ref="harness.brief@1.0.0",
        repository_grant=GRANT,
        execution_refs={"correlation_id": "corr-1"},
    )
    profile = ProfileCatalogue.from_yaml(CATALOGUE).resolve("harness.brief@1.0.0")
    return QueuedRequest(run, profile, parse_repository_grant(GRANT))


def _answer(request: QueuedRequest, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "ok": True,
        "evidence": {
            "contract_version": "1.0",
            "request_id": request.request_id,
            "profile_ref": "harness.brief@1.0.0",
            "rein_id": "glas",
            "rein_version": "2.1.0",
            "outcome": "succeeded",
            "duration_s": 1.5,
            "tokens_spent": 0,
        },
        "path": "briefs/x.md",
        "committed": True,
        "tool_output": "raw model output",
    }
    body.update(overrides)
    return body


async def test_the_request_is_posted_and_a_1_0_answer_returned_without_tool_output(
    router: respx.MockRouter, gateway: HttpGlasGateway, request_: QueuedRequest
) -> None:
    route = router.post("/v1/requests").mock(
        return_value=httpx.Response(200, json=_answer(request_))
    )
    result = await gateway.execute(request_)
    assert result.ok and result.evidence.tokens_spent == 0
    assert result.tool_output is None and result.path == "briefs/x.md"
    sent = route.calls.last.request
    assert sent.headers["Authorization"] == "Bearer glas-token"
    assert sent.headers["Idempotency-Key"] == request_.request_id
    body = json.loads(sent.content)
    assert body["profile_ref"] == "harness.brief@1.0.0"
    assert body["repository_grant"] == GRANT
    assert body["run"]["attempt"] == 1 and body["execution_refs"] == {"correlation_id": "corr-1"}


@pytest.mark.parametrize(
    "answer",
    [
        {"ok": True},
        {"contract_version": "2.0"},
        "not json",
    ],
)
async def test_an_answer_that_is_not_gateway_result_1_0_is_a_protocol_error(
    router: respx.MockRouter, gateway: HttpGlasGateway, request_: QueuedRequest, answer: Any
) -> None:
    if isinstance(answer, dict) and "contract_version" in answer:
        body = _answer(request_)
        body["evidence"]["contract_version"] = answer["contract_version"]
        response = httpx.Response(200, json=body)
    elif isinstance(answer, dict):
        response = httpx.Response(200, json=answer)
    else:
        response = httpx.Response(200, text=answer)
    router.post("/v1/requests").mock(return_value=response)
    with pytest.raises(GatewayProtocolError):
        await gateway.execute(request_)


async def test_an_answer_for_another_request_is_a_protocol_error(
    router: respx.MockRouter, gateway: HttpGlasGateway, request_: QueuedRequest
) -> None:
    body = _answer(request_)
    body["evidence"]["request_id"] = "someone-else.1"
    router.post("/v1/requests").mock(return_value=httpx.Response(200, json=body))
    with pytest.raises(GatewayProtocolError, match="another request"):
        await gateway.execute(request_)


async def test_a_refusal_names_status_and_code_but_not_the_body(
    router: respx.MockRouter, gateway: HttpGlasGateway, request_: QueuedRequest
) -> None:
    route = router.post("/v1/requests").mock(
        return_value=httpx.Response(
            404, json={"code": "unknown_profile", "detail": "secret detail"}
        )
    )
    with pytest.raises(GatewayRefused) as refused:
        await gateway.execute(request_)
    assert refused.value.reason == "glas refused the request: 404 unknown_profile"
    assert refused.value.reopen is False
    assert route.call_count == 1  # conclusive: not retried


async def test_outages_are_retried_then_reported_as_unavailable(
    router: respx.MockRouter, gateway: HttpGlasGateway, request_: QueuedRequest
) -> None:
    route = router.post("/v1/requests").mock(
        side_effect=[
            httpx.ConnectError("refused"),
            httpx.Response(503),
            httpx.Response(200, json=_answer(request_)),
        ]
    )
    assert (await gateway.execute(request_)).ok
    assert route.call_count == 3

    route.side_effect = [httpx.Response(429), httpx.Response(502), httpx.ReadTimeout("slow")]
    with pytest.raises(GatewayUnavailable) as unavailable:
        await gateway.execute(request_)
    assert unavailable.value.reopen is True
