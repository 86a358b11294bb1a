"""One label grammar (ops_contracts.Label): a label a definition declares can be claimed
and listed by; a label a definition refuses is refused by the claim and the listing too."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from ac_definitions import RecordingApplier, definition_doc, spec_of
from ac_testkit import AppClient, SeededQueue
from activity_core.definitions.sync import sync_definitions

# Accepted by definitions before the grammars were one, refused by claims and listings.
LABELS = ["prio#1", "café", "needs+review", "研究/β"]


def with_labels(labels: list[Any]) -> dict[str, Any]:
    doc = definition_doc()
    doc["rules"][0]["action"]["labels"] = labels
    return doc


async def test_a_label_a_definition_declares_can_be_claimed_and_listed_by(
    api: AppClient, pool: asyncpg.Pool, seeded: SeededQueue
) -> None:
    # definition sync admits the labels; the run carries them as emission stores them
    # (the action's labels, unchanged)
    spec = spec_of(with_labels(LABELS))
    await sync_definitions(pool, [spec], RecordingApplier())
    [source] = spec.task_sources()
    await seeded.run(labels=list(source.action.labels), activity_definition_id=spec.uuid)

    operator = api.operator_headers()
    for label in LABELS:
        listed = await api.http.get("/ops-runs", params={"label": label}, headers=operator)
        assert listed.status_code == 200, listed.text
        assert [r["labels"] for r in listed.json()["runs"]] == [LABELS], label
    every = await api.http.get("/ops-runs", params={"label": LABELS}, headers=operator)
    assert len(every.json()["runs"]) == 1

    nothing = await api.claim(labels=["automated"])
    assert nothing.status_code == 200 and nothing.json()["runs"] == []
    claimed = await api.claim(labels=LABELS, labels_mode="all")
    assert claimed.status_code == 200, claimed.text
    [run] = claimed.json()["runs"]
    assert run["labels"] == LABELS


@pytest.mark.parametrize("label", ["a,b", "has space", "x" * 101, "zero\u200bwidth"])
async def test_a_label_a_definition_refuses_is_refused_everywhere(
    api: AppClient, label: str
) -> None:
    with pytest.raises(ValueError, match="a label must"):
        spec_of(with_labels([label]))
    claim = await api.claim(labels=[label])
    assert claim.status_code == 422 and claim.json()["code"] == "invalid_request"
    assert any("labels" in e["loc"] for e in claim.json()["errors"])
    listed = await api.http.get(
        "/ops-runs", params={"label": label}, headers=api.operator_headers()
    )
    assert listed.status_code == 422 and listed.json()["code"] == "invalid_request"
    assert any("label" in e["loc"] for e in listed.json()["errors"])
