"""Which waiting keys a wake-up serves (queue/dispatch.may_match) and what a notification's
payload says (queue/wakeups.opened_labels): the dispatcher skips a key only when no run
with those labels could be claimed under it, so a wrong answer here is a lost wake-up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from activity_core.queue.claim_types import ClaimKey
from activity_core.queue.dispatch import may_match
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
