"""Shared fixtures of the rein-aharness tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ops_testsupport.factories import RUN_ID, WORKER, maximal_raw_result, run_projection
from rein_aharness.outbox import OutboxStore, Retention
from rein_worker_kit import (  # noqa: F401  (fixtures for the worker tests)
    activity_core,
    repos,
    restore_logging,
    run_command,
)

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


@pytest.fixture
def maximal_result() -> dict[str, Any]:
    return maximal_raw_result()


@pytest.fixture
def projection() -> Callable[..., dict[str, Any]]:
    return run_projection


def tree_bytes(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path, path.read_bytes()
