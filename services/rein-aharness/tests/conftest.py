"""Shared fixtures of the rein-aharness tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ops_evidence import MAX_COLLECTION_ITEMS, MAX_IDENTIFIER_CHARS, MAX_INT, MAX_PATH_CHARS
from ops_evidence.fields import bounded_list, git_object_id, repo_path
from rein_aharness.outbox import OutboxStore, Retention
from rein_worker_kit import (  # noqa: F401  (fixtures for the worker tests)
    activity_core,
    repos,
)

WORKER = "rein-aharness@railiance01"
RUN_ID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
TXN = "txn-0001"


class FakeClock:
    """A settable UTC clock for stores whose ages and retention tests control."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def outbox_root(tmp_path: Path) -> Path:
    return tmp_path / "state" / "close-outbox"


@pytest.fixture
def store(outbox_root: Path, clock: FakeClock) -> OutboxStore:
    return OutboxStore(outbox_root, clock=clock, retention=Retention())


def close_kwargs(**overrides: Any) -> dict[str, Any]:
    """enqueue_close arguments of a plain completion; override any of them."""
    fields: dict[str, Any] = {
        "run_id": RUN_ID,
        "transaction_id": TXN,
        "worker_id": WORKER,
        "action": "complete",
        "result": {"ok": True, "path": "briefs/2026-01-01.md", "committed": True},
        "error": None,
        "reopen": False,
    }
    fields.update(overrides)
    return fields


def fail_kwargs(**overrides: Any) -> dict[str, Any]:
    fields = close_kwargs(action="fail", result=None, error="llm timeout", reopen=False)
    fields.update(overrides)
    return fields


@pytest.fixture
def make_close() -> Callable[..., dict[str, Any]]:
    return close_kwargs


@pytest.fixture
def make_fail() -> Callable[..., dict[str, Any]]:
    return fail_kwargs


def maximal_raw_result() -> dict[str, Any]:
    """A raw result whose normalization is as large as the allowlist permits (~63 KB)."""
    identifier = '"' * MAX_IDENTIFIER_CHARS
    path = "\U0001f600" * MAX_PATH_CHARS
    git_id = "f" * 64
    identifiers = [identifier] * MAX_COLLECTION_ITEMS
    paths = [path] * MAX_COLLECTION_ITEMS
    evidence: dict[str, Any] = {
        key: identifier
        for key in (
            "request_id",
            "contract_version",
            "profile_ref",
            "rein_id",
            "rein_version",
            "resolved_model",
            "sandbox_profile",
            "outcome",
        )
    }
    evidence.update(
        {
            "tool_events_completeness": "unavailable",
            "duration_s": 2.2250738585072014e-308,
            "tokens_spent": MAX_INT,
            "input_tokens": MAX_INT,
            "output_tokens": MAX_INT,
            "tool_events_count": MAX_INT,
            "head_after": git_id,
            "commit_refs": [git_id] * MAX_COLLECTION_ITEMS,
            "artifact_refs": paths,
            "refs": {
                "correlation_id": identifier,
                "causation_id": identifier,
                "request_ref": identifier,
                "goal_refs": identifiers,
                "initiative_refs": identifiers,
            },
        }
    )
    transaction: dict[str, Any] = {
        key: identifier
        for key in (
            "transaction_id",
            "correlation_id",
            "baseline_digest",
            "grant_id",
            "acceptance_policy_id",
            "external_metrics_id",
        )
    }
    transaction.update(
        {
            "acceptance": "rejected",
            # acceptance lists are kept whole or not at all: send the largest that fits
            "accepted_commits": bounded_list([git_id] * MAX_COLLECTION_ITEMS, git_object_id),
            "accepted_paths": bounded_list(paths, repo_path),
        }
    )
    return {
        "ok": False,
        "path": path,
        "repository_transaction": transaction,
        "head_after": git_id,
        "target_repo": "r" * 256,
        "committed": False,
        "evidence": evidence,
        "tool_output": "x" * 1_000_000,
        "prompt": "never stored",
    }


@pytest.fixture
def maximal_result() -> dict[str, Any]:
    return maximal_raw_result()


def run_projection(run_id: str = RUN_ID, **overrides: Any) -> dict[str, Any]:
    """An Activity Core run projection as the queue answers it."""
    run: dict[str, Any] = {
        "id": run_id,
        "activity_definition_id": "0b7f3c1e-5d2a-4c8e-9f10-2a3b4c5d6e7f",
        "idempotency_key": "fi-daily-brief:daily-brief:scheduled:2026-01-01",
        "target_repo": "research/briefs",
        "title": "Research brief",
        "description": "",
        "labels": ["automated"],
        "priority": "medium",
        "state": "claimed",
        "claim_owner": WORKER,
        "lease_until": "2026-01-01T12:15:00Z",
        "attempt": 1,
        "source_type": "rule",
        "source_id": "daily-brief",
        "triggering_event_id": "scheduled:2026-01-01",
        "approach_hint": None,
        "harness_profile_ref": "harness.agent-dev@1.0.0",
        "execution_refs": {},
        "repository_grant": None,
        "result": None,
        "last_error": None,
        "created_at": "2026-01-01T06:00:00Z",
        "updated_at": "2026-01-01T06:00:00Z",
    }
    run.update(overrides)
    return run


@pytest.fixture
def projection() -> Callable[..., dict[str, Any]]:
    return run_projection


def tree_bytes(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path, path.read_bytes()


def read_json(path: Path) -> dict[str, Any]:
    value = json.loads(path.read_bytes())
    assert isinstance(value, dict)
    return value
