"""Which waiting keys a wake-up serves (queue/dispatch.may_match) and what a notification's
payload says (queue/wakeups.opened_labels): the dispatcher skips a key only when no run
with those labels could be claimed under it, so a wrong answer here is a lost wake-up.
Likewise when an empty look at a key's queue spares a new long poll its statement
(Dispatcher.knows_nothing_open)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from activity_core.queue.claim_types import ClaimKey
from activity_core.queue.dispatch import (
    EMPTY_TRUSTED_SECONDS,
    WAKE_LOG_LENGTH,
    Dispatcher,
    may_match,
)
from activity_core.queue.wakeups import opened_labels

LABELS = st.frozensets(st.sampled_from(["a", "b", "c", "d"]), max_size=4)


@given(run=LABELS, wanted=LABELS)
def test_may_match_is_the_claim_statements_label_test(
    run: frozenset[str], wanted: frozenset[str]
) -> None:
    labels = tuple(sorted(wanted))
    # the claim statement: 'any' is `labels ?| wanted`, 'all' is `labels @> wanted`
    assert may_match(ClaimKey("any", labels, 1), run) == bool(run & wanted)
    assert may_match(ClaimKey("all", labels, 1), run) == (wanted <= run)
    assert may_match(ClaimKey("none", (), 1), run)


@pytest.mark.parametrize(
    ("payload", "labels"),
    [
        ('["gpu", "big"]', frozenset({"gpu", "big"})),
        ("[]", frozenset()),
        ("", None),  # an older trigger, or labels too long for a notification
        ("not json", None),
        ('{"gpu": 1}', None),
        ('["gpu", 1]', None),
        ('"gpu"', None),
        ("[" * 10_000, None),  # deeply nested garbage: still just "anything"
    ],
)
def test_a_payload_names_labels_or_anything(payload: str, labels: frozenset[str] | None) -> None:
    assert opened_labels(payload) == labels


def idle_dispatcher(*, listening: bool = True) -> Dispatcher:
    async def never(*_: object) -> Any:
        raise AssertionError("no statement in these tests")

    return Dispatcher(
        lease_for_waiters=never,
        reclaim=never,
        release=never,
        claimers_per_statement=lambda _key: 10,
        listening=lambda: listening,
    )


GPU = ClaimKey("any", ("gpu",), 1)


async def test_an_empty_look_is_trusted_until_a_wake_up_its_key_may_match() -> None:
    dispatcher = idle_dispatcher()
    now = asyncio.get_running_loop().time()
    dispatcher.found_empty(GPU, seen=dispatcher.generation, at=now)
    assert dispatcher.knows_nothing_open(GPU)
    dispatcher.wake(frozenset({"cpu"}))
    assert dispatcher.knows_nothing_open(GPU)
    dispatcher.wake(frozenset({"gpu", "big"}))
    assert not dispatcher.knows_nothing_open(GPU)


async def test_an_empty_look_is_not_trusted_past_what_the_wake_log_remembers() -> None:
    dispatcher = idle_dispatcher()
    now = asyncio.get_running_loop().time()
    dispatcher.found_empty(GPU, seen=dispatcher.generation, at=now)
    for _ in range(WAKE_LOG_LENGTH):
        dispatcher.wake(frozenset({"cpu"}))
    assert dispatcher.knows_nothing_open(GPU)  # the log still reaches back to it
    dispatcher.wake(frozenset({"cpu"}))
    assert not dispatcher.knows_nothing_open(GPU)


@pytest.mark.parametrize("case", ["old", "reconnect", "not listening", "sent before a wake-up"])
async def test_an_empty_look_is_not_trusted(case: str) -> None:
    dispatcher = idle_dispatcher(listening=case != "not listening")
    now = asyncio.get_running_loop().time()
    seen = dispatcher.generation
    if case == "old":
        now -= EMPTY_TRUSTED_SECONDS + 0.1
    if case == "sent before a wake-up":
        dispatcher.wake(frozenset({"gpu"}))  # arrived while the statement was on its way
    dispatcher.found_empty(GPU, seen=seen, at=now)
    if case == "reconnect":
        dispatcher.wake(None)
    assert not dispatcher.knows_nothing_open(GPU)
