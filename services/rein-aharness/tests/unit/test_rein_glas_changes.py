"""Fetching a remote Glas request's changes bundle (adapters/glas_changes.py), against
recorded HTTP (respx): the bound while streaming, retries only on what is transient."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
import respx

from rein_aharness.adapters.glas_changes import (
    GlasChangesClient,
    GlasChangesRefused,
    GlasChangesTooLarge,
    GlasChangesUnavailable,
)
from rein_aharness.adapters.retry import RetryPolicy

BASE = "http://glas.test"
REQUEST = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f.1"
PATH = f"/v1/requests/{REQUEST}/changes.bundle"
FAST = RetryPolicy(attempts=3, initial_wait=0, max_wait=0)


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(base_url=BASE, assert_all_called=False)


@pytest.fixture
async def client(router: respx.MockRouter) -> AsyncIterator[GlasChangesClient]:
    async with GlasChangesClient(
        BASE,
        "glas-token",
        max_bytes=1024,
        transport=httpx.MockTransport(router.async_handler),
        retry=FAST,
    ) as glas:
        yield glas


async def test_the_bundle_is_fetched_with_the_bearer_token(
    router: respx.MockRouter, client: GlasChangesClient
) -> None:
    route = router.get(PATH).mock(return_value=httpx.Response(200, content=b"bundle bytes"))
    assert await client.fetch(REQUEST) == b"bundle bytes"
    sent = route.calls.last.request
    assert sent.headers["authorization"] == "Bearer glas-token"
    assert sent.headers["accept"] == "application/x-git-bundle"


async def test_a_body_over_the_bound_is_cut_off_while_it_streams(
    router: respx.MockRouter, client: GlasChangesClient
) -> None:
    sent: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(1000):
            sent.append(1)
            yield b"x" * 512

    route = router.get(PATH).mock(side_effect=lambda _: httpx.Response(200, content=endless()))
    with pytest.raises(GlasChangesTooLarge):
        await client.fetch(REQUEST)
    assert route.call_count == 1  # conclusive: the same bundle stays too large
    assert len(sent) <= 4  # read no further than the bound

    route.mock(side_effect=None, return_value=httpx.Response(200, content=b"x" * 1025))
    with pytest.raises(GlasChangesTooLarge):
        await client.fetch(REQUEST)


async def test_an_encoded_body_is_refused(
    router: respx.MockRouter, client: GlasChangesClient
) -> None:
    router.get(PATH).mock(
        return_value=httpx.Response(200, content=b"x", headers={"content-encoding": "gzip"})
    )
    with pytest.raises(GlasChangesRefused, match="encoded"):
        await client.fetch(REQUEST)


@pytest.mark.parametrize("status", [404, 401, 403, 410, 302])
async def test_a_conclusive_answer_is_refused_at_once(
    router: respx.MockRouter, client: GlasChangesClient, status: int
) -> None:
    route = router.get(PATH).mock(
        return_value=httpx.Response(status, json={"code": "not_found", "detail": "secret"})
    )
    with pytest.raises(GlasChangesRefused) as refused:
        await client.fetch(REQUEST)
    assert route.call_count == 1
    assert refused.value.status == status and refused.value.code == "not_found"
    assert "secret" not in str(refused.value)


async def test_outages_are_retried_then_unavailable(
    router: respx.MockRouter, client: GlasChangesClient
) -> None:
    route = router.get(PATH).mock(
        side_effect=[
            httpx.Response(503),
            httpx.ConnectError("x"),
            httpx.Response(200, content=b"b"),
        ]
    )
    assert await client.fetch(REQUEST) == b"b"
    assert route.call_count == 3
    route.mock(side_effect=[httpx.Response(408), httpx.Response(429), httpx.ReadTimeout("slow")])
    with pytest.raises(GlasChangesUnavailable):
        await client.fetch(REQUEST)


async def test_a_try_is_bounded_in_all_not_only_between_bytes(router: respx.MockRouter) -> None:
    async def drip() -> AsyncIterator[bytes]:
        while True:
            await anyio.sleep(0.05)
            yield b"x"

    router.get(PATH).mock(side_effect=lambda _: httpx.Response(200, content=drip()))
    async with GlasChangesClient(
        BASE,
        max_bytes=1 << 20,
        transport=httpx.MockTransport(router.async_handler),
        timeout_seconds=0.3,
        retry=RetryPolicy(attempts=2, initial_wait=0, max_wait=0),
    ) as glas:
        with anyio.fail_after(5), pytest.raises(GlasChangesUnavailable, match="longer than"):
            await glas.fetch(REQUEST)
