"""The shapes the outbox store returns (status, replay plans, enqueue results), its sidecar
naming, and the small pure helpers its parts share (store.py and its store_*.py parts)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from rein_aharness.outbox.record import OutboxRecord

__all__ = [
    "SIDECAR_FORMAT",
    "SIDECAR_SUFFIX",
    "EnqueueResult",
    "EntrySummary",
    "OutboxSnapshot",
    "ReplayPlan",
    "Retention",
    "StoreState",
    "sidecar_name",
]

SIDECAR_SUFFIX = ".reason.json"
SIDECAR_FORMAT = "rein-aharness/close-outbox-quarantine-reason/v1"
MAX_SIDECAR_BYTES = 8 * 1024
MAX_NAME_CHARS = 300

StoreState = Literal["pending", "delivered", "quarantined"]


@dataclass(frozen=True)
class Retention:
    """Delivered records older than `max_age` and beyond the newest `keep_newest` go."""

    max_age: timedelta = timedelta(days=7)
    keep_newest: int = 1000


@dataclass(frozen=True)
class EnqueueResult:
    """The state the identity is in after enqueue; `created` when this call wrote it."""

    state: StoreState
    record: OutboxRecord
    created: bool


@dataclass(frozen=True)
class EntrySummary:
    """One pending or quarantined item, as status shows it."""

    state: StoreState
    name: str
    key: str | None
    run_id: str | None
    action: str | None
    attempts: int | None
    last_failure_class: str | None
    created_at: datetime | None
    reason: str | None
    code: str | None
    worker_id: str | None = None  # the identity the close was recorded under
    run_attempt: int | None = None  # the claim attempt it was decided under


@dataclass(frozen=True)
class ReplayPlan:
    """Deliverable entries, oldest first; how many invalid records were quarantined; the
    entries recorded under another worker identity (quarantined or set aside); the keys
    of lost entries."""

    deliverable: list[OutboxRecord]
    quarantined: int
    foreign: list[OutboxRecord] = field(default_factory=list)
    lost: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutboxSnapshot:
    """`lost`: keys the outbox knew pending that are in none of its directories."""

    root: Path
    taken_at: datetime
    pending: tuple[EntrySummary, ...]
    delivered_count: int
    quarantined: tuple[EntrySummary, ...]
    lost: tuple[str, ...] = ()
    outbox_id: str | None = None
    created_by: str | None = None  # the worker identity that created the outbox


def sidecar_name(entry: str) -> str:
    stem = entry[: -len(".json")] if entry.endswith(".json") else entry
    return stem + SIDECAR_SUFFIX


def display_name(name: str) -> str:
    """A printable, bounded rendering of a file name (which may not be valid UTF-8)."""
    raw = os.fsencode(name)
    text = raw.decode("utf-8", "backslashreplace")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text[:MAX_NAME_CHARS]


def utc_now() -> datetime:
    return datetime.now(UTC)


def same_intent(a: OutboxRecord, b: OutboxRecord) -> bool:
    return (a.run_id, a.transaction_id, a.intent_digest, a.attempt) == (
        b.run_id,
        b.transaction_id,
        b.intent_digest,
        b.attempt,
    )


def delivery_order(record: OutboxRecord) -> tuple[datetime, str]:
    return (record.created_at, record.key)


def bounded_str(value: object) -> str | None:
    return value[:64] if isinstance(value, str) else None


def age_order(summary: EntrySummary) -> tuple[bool, datetime, str]:
    created = summary.created_at or datetime.max.replace(tzinfo=UTC)
    return (summary.created_at is None, created, summary.name)


def sidecar_owners(sidecar: str) -> tuple[str, str]:
    """The two entry names whose sidecar is `sidecar` (`x.json` and `x`)."""
    stem = sidecar[: -len(SIDECAR_SUFFIX)]
    return (stem + ".json", stem)
