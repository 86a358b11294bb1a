"""What an operator sees of an ops run: disposition, artefacts and compact evidence only."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activity_core.artefacts.projection import (
    artifacts_of,
    compact_evidence_of,
    disposition,
    project_ops_run,
)
from activity_core.changes.anchors import change_anchor
from ops_contracts import RunState

NOW = datetime(2024, 5, 1, 6, 0, tzinfo=UTC)
BASE = "https://forgejo.coulomb.social"
SHA = "0123456789abcdef0123456789abcdef01234567"
MARK = "RAW-MODEL-OUTPUT-MARKER"


@pytest.mark.parametrize(
    ("state", "lease_until", "expected"),
    [
        (RunState.open, None, "queued"),
        (RunState.claimed, NOW + timedelta(seconds=1), "running"),
        (RunState.claimed, NOW, "stalled"),
        (RunState.claimed, NOW - timedelta(minutes=5), "stalled"),
        (RunState.claimed, None, "stalled"),
        (RunState.succeeded, None, "succeeded"),
        (RunState.failed, None, "failed"),
        (RunState.expired, None, "expired"),
    ],
)
def test_disposition(state: RunState, lease_until: datetime | None, expected: str) -> None:
    assert disposition(state, lease_until, NOW) == expected


def test_artefacts_come_from_the_normalized_result_only() -> None:
    run_id = uuid.uuid4()
    result: dict[str, Any] = {
        "path": "briefs/a.md",
        "head_after": SHA,
        "target_repo": "research/briefs",
        "execution_evidence": {
            "artifact_refs": ["briefs/a.md", "briefs/b.md", "../escape", MARK + " x"],
            "prompt": MARK,
        },
        "artifacts": [{"path": "smuggled.md"}],
        "tool_output": MARK,
    }
    # not published: no Forgejo link (the commit is on the worker only), and no change
    # view either without stored changes
    unpublished = artifacts_of(run_id, result, BASE)
    assert [a.path for a in unpublished] == ["briefs/a.md", "briefs/b.md", f"{MARK} x"]
    assert all(a.forgejo_url is None and a.change_url is None for a in unpublished)
    # its changes stored: each file links to its diff on the run's own page
    stored = artifacts_of(run_id, result, BASE, has_changes=True)
    assert stored[0].change_url == f"/ops/ui/runs/{run_id}#{change_anchor('briefs/a.md')}"
    assert all(a.forgejo_url is None for a in stored)
    # published: Forgejo at the published commit, and only there
    found = artifacts_of(run_id, result, BASE, published_commit=SHA, has_changes=True)
    assert found[0].forgejo_url == f"{BASE}/research/briefs/src/commit/{SHA}/briefs/a.md"
    assert found[2].forgejo_url == (
        f"{BASE}/research/briefs/src/commit/{SHA}/RAW-MODEL-OUTPUT-MARKER%20x"
    )
    assert all(a.change_url is None for a in found)
    assert all(a.ops_run_id == run_id for a in found)


def test_artefact_without_repository_or_commit_has_no_link() -> None:
    (only,) = artifacts_of(uuid.uuid4(), {"path": "a.md", "head_after": SHA}, BASE)
    assert only.target_repo is None and only.forgejo_url is None
    (only,) = artifacts_of(uuid.uuid4(), {"path": "a.md", "target_repo": "o/r"}, BASE)
    assert only.head_after is None and only.forgejo_url is None
    assert artifacts_of(uuid.uuid4(), {"head_after": SHA, "target_repo": "o/r"}, BASE) == []
    assert artifacts_of(uuid.uuid4(), None, BASE) == []
    assert artifacts_of(uuid.uuid4(), "not a dict", BASE) == []


def test_evidence_head_after_is_used_when_the_result_has_none() -> None:
    (only,) = artifacts_of(
        uuid.uuid4(),
        {"path": "a.md", "target_repo": "o/r", "execution_evidence": {"head_after": "abc1234"}},
        BASE,
        published_commit="abc1234",
    )
    assert only.head_after == "abc1234"
    assert only.forgejo_url == f"{BASE}/o/r/src/commit/abc1234/a.md"


def test_compact_evidence_accepts_glas_and_stored_shapes() -> None:
    glas = {"ok": True, "evidence": {"resolved_model": "m-1", "profile_ref": "p@1.0.0"}}
    stored = {"execution_evidence": {"resolved_model": "m-1", "profile_ref": "p@1.0.0"}}
    assert compact_evidence_of(glas) == compact_evidence_of(stored)
    assert compact_evidence_of(stored).resolved_model == "m-1"
    assert compact_evidence_of({"execution_evidence": {"resolved_model": "has space"}}) == (
        compact_evidence_of(None)
    )


def test_a_projection_never_carries_description_or_raw_result_fields() -> None:
    row = {
        "id": uuid.uuid4(),
        "title": "Brief",
        "target_repo": "research/briefs",
        "state": "failed",
        "attempt": 3,
        "claim_owner": "w@1",
        "lease_until": None,
        "priority": "high",
        "labels": ["automated", 7],
        "last_error": "timeout\x00\nafter 30s",
        "harness_profile_ref": None,
        "triggering_event_id": "e",
        "created_at": NOW,
        "updated_at": NOW,
        "description": MARK,
        "result": {
            "ok": False,
            "messages": [MARK],
            "evidence": {"resolved_model": "m", "raw_response": MARK, "refs": {"x": MARK}},
            "repository_transaction": {"allowed_paths": [MARK], "grant_id": "g"},
        },
    }
    run = project_ops_run(row, matched_by="run_id", forgejo_base=BASE, now=NOW)
    assert run.disposition == "failed"
    assert run.labels == ["automated"]
    assert run.last_error == "timeout  after 30s"
    assert run.execution_evidence.resolved_model == "m"
    assert MARK not in json.dumps(run.model_dump(mode="json"))
