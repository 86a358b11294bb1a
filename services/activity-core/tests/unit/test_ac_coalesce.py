"""The Coalescer: requests that arrive while a call for their key runs share the next call.

Pure asyncio, no database: each call is gated by an Event the test opens, so which items
share a call is decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activity_core.queue.coalesce import Coalescer


class GatedCalls:
    """A call function that records each call and waits for the test to open its gate."""

    def __init__(self, *, gated: bool = True) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.started = asyncio.Event()
        self.fail_with: Exception | None = None

    async def __call__(self, key: str, items: list[int]) -> list[str]:
        self.calls.append((key, list(items)))
        self.started.set()
        await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        return [f"{key}:{item}" for item in items]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_lone_request_is_called_at_once_alone() -> None:
    calls = GatedCalls(gated=False)
    coalescer = Coalescer(calls, max_items=lambda _: 32)
    assert await coalescer.submit("k", 1) == "k:1"
    assert calls.calls == [("k", [1])]
    assert coalescer.keys_in_use == 0


async def test_requests_arriving_during_a_call_share_the_next_one_in_arrival_order() -> None:
    calls = GatedCalls()
    coalescer = Coalescer(calls, max_items=lambda _: 32)
    first = asyncio.create_task(coalescer.submit("k", 0))
    await calls.started.wait()
    rest = [asyncio.create_task(coalescer.submit("k", i)) for i in range(1, 6)]
    await settle()
    assert calls.calls == [("k", [0])]  # nobody joins a call that is already running
    calls.gate.set()
    assert await first == "k:0"
    assert [await t for t in rest] == [f"k:{i}" for i in range(1, 6)]
    assert calls.calls == [("k", [0]), ("k", [1, 2, 3, 4, 5])]
    assert coalescer.keys_in_use == 0


async def test_max_items_bounds_each_call_per_key() -> None:
    calls = GatedCalls()
    coalescer = Coalescer(calls, max_items=lambda key: 3 if key == "k" else 1)
    first = asyncio.create_task(coalescer.submit("k", 0))
    await calls.started.wait()
    rest = [asyncio.create_task(coalescer.submit("k", i)) for i in range(1, 8)]
    await settle()
    calls.gate.set()
    await asyncio.gather(first, *rest)
    assert [items for _, items in calls.calls] == [[0], [1, 2, 3], [4, 5, 6], [7]]


async def test_max_items_of_one_or_less_turns_coalescing_off() -> None:
    calls = GatedCalls()
    coalescer = Coalescer(calls, max_items=lambda _: 1)
    tasks = [asyncio.create_task(coalescer.submit("k", i)) for i in range(3)]
    await settle()
    # nobody waits for another's call: three calls are running at once
    assert [items for _, items in calls.calls] == [[0], [1], [2]]
    assert coalescer.keys_in_use == 0
    calls.gate.set()
    assert await asyncio.gather(*tasks) == ["k:0", "k:1", "k:2"]


async def test_keys_never_share_a_call() -> None:
    calls = GatedCalls()
    coalescer = Coalescer(calls, max_items=lambda _: 32)
    tasks = [asyncio.create_task(coalescer.submit(k, i)) for i, k in enumerate("abab")]
    await settle()
    calls.gate.set()
    assert await asyncio.gather(*tasks) == ["a:0", "b:1", "a:2", "b:3"]
    # all four were waiting before any call started: one call per key
    assert sorted(calls.calls) == [("a", [0, 2]), ("b", [1, 3])]


async def test_max_running_lets_calls_of_one_key_overlap() -> None:
    calls = GatedCalls()
    coalescer = Coalescer(calls, max_items=lambda _: 32, max_running=2)
    first = asyncio.create_task(coalescer.submit("k", 0))
    await calls.started.wait()
    tasks = [first, asyncio.create_task(coalescer.submit("k", 1))]
    await settle()
    assert calls.calls == [("k", [0]), ("k", [1])]  # the second did not wait for the first
    calls.gate.set()
    assert await asyncio.gather(*tasks) == ["k:0", "k:1"]
    with pytest.raises(ValueError):
        Coalescer(calls, max_items=lambda _: 1, max_running=0)


async def test_a_failed_call_fails_each_of_its_items_and_the_next_call_runs() -> None:
    calls = GatedCalls()
    coalescer = Coalescer(calls, max_items=lambda _: 32)
    calls.fail_with = ConnectionResetError("database went away")
    tasks = [asyncio.create_task(coalescer.submit("k", i)) for i in range(3)]
    await settle()
    calls.gate.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(o, ConnectionResetError) for o in outcomes)
    calls.fail_with = None
    assert await coalescer.submit("k", 9) == "k:9"
    assert coalescer.keys_in_use == 0


async def test_a_call_answering_the_wrong_number_of_results_fails_its_items() -> None:
    gate = asyncio.Event()

    async def slow(key: str, items: list[int]) -> list[str]:
        await gate.wait()
        return [key]  # one result, whatever the number of items

    coalescer = Coalescer(slow, max_items=lambda _: 32)
    first = asyncio.create_task(coalescer.submit("k", 0))
    await settle()
    pair = [asyncio.create_task(coalescer.submit("k", i)) for i in (1, 2)]
    await settle()
    gate.set()
    assert await first == "k"
    outcomes = await asyncio.gather(*pair, return_exceptions=True)
    assert all(isinstance(o, RuntimeError) and "1 of 2" in str(o) for o in outcomes)


async def test_a_cancelled_caller_neither_cancels_the_shared_call_nor_joins_a_later_one() -> None:
    calls = GatedCalls()
    coalescer = Coalescer(calls, max_items=lambda _: 32)
    first = asyncio.create_task(coalescer.submit("k", 0))
    await calls.started.wait()
    waiting = [asyncio.create_task(coalescer.submit("k", i)) for i in (1, 2, 3)]
    await settle()
    first.cancel()  # its call is running: the call goes on
    waiting[1].cancel()  # its call has not started: item 2 is dropped from it
    await settle()
    calls.gate.set()
    assert await waiting[0] == "k:1" and await waiting[2] == "k:3"
    for task in (first, waiting[1]):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert calls.calls == [("k", [0]), ("k", [1, 3])]
    assert coalescer.keys_in_use == 0


@settings(max_examples=30, deadline=None)
@given(
    plan=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 3)), min_size=1, max_size=40),
    max_items=st.integers(1, 8),
    max_running=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_every_item_gets_its_own_result_exactly_once(
    plan: list[tuple[str, int]], max_items: int, max_running: int, seed: int
) -> None:
    """Whatever the interleaving, each submit answers its own item's result, no call
    exceeds max_items, and no key is left behind."""
    rng = random.Random(seed)
    seen: list[int] = []

    async def call(key: str, items: list[int]) -> list[str]:
        assert 1 <= len(items) <= max_items
        seen.extend(items)
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
        return [f"{key}:{item}" for item in items]

    async def scenario() -> None:
        coalescer = Coalescer(call, max_items=lambda _: max_items, max_running=max_running)

        async def one(n: int, key: str, pause: int) -> str:
            for _ in range(pause):
                await asyncio.sleep(0)
            return await coalescer.submit(key, n)

        answers = await asyncio.gather(*(one(n, k, p) for n, (k, p) in enumerate(plan)))
        assert answers == [f"{k}:{n}" for n, (k, _) in enumerate(plan)]
        assert sorted(seen) == list(range(len(plan)))
        assert coalescer.keys_in_use == 0

    asyncio.run(scenario())
