"""The on-disk entry record (format v2, reading v1) and the checks a file must pass.

An entry file `<key>.json` is exactly the canonical JSON (`ops_contracts.canonical_json`)
of an `OutboxRecord`:

    {"attempt": 2, "attempts": 1, "created_at": "...Z", "delivered_at": null,
     "disposition": null, "format": "rein-aharness/close-outbox-entry/v2",
     "intent": {<CloseIntent v1>}, "intent_digest": "<close_intent_digest>",
     "key": "<64 hex>", "last_attempt_at": "...Z", "last_failure": {"exception_class":
     "QueueTransportError", "marker": "delivery_failed"}, "run_id": "...",
     "state": "pending", "transaction_id": "..." | null}

`disposition` (delivered records): how Activity Core took the close (`applied`,
`reconciled`, `reopened`), or `cancelled`: it refused the close because an operator had
cancelled the run meanwhile, an expected end that is settled, not quarantined.

`attempt` is the claim attempt the close was decided under, sent with it for fencing
(null: none is known, the close is sent without one); `attempts` counts deliveries.

Format v1 is the same record without `attempt`, as the worker wrote it before the
attempt was stored. A v1 file is read as the v2 record it stands for, its attempt taken
from a worker transaction id (`rtx-<run-id>.<attempt>`) or else null, and is written back
as v2 by the next change of its state; it is never quarantined for lacking the attempt.

Reading a file re-derives everything that can be derived: the key from the identity,
the intent digest from the intent, the normalized result and sanitized error from
themselves, the attempt from a worker transaction id, the state from the directory, and
the bytes from the parsed record. Any difference means the file is not one this code
wrote, and it is quarantined.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

import ops_evidence
from ops_contracts import (
    Attempt,
    CloseDisposition,
    CloseIntent,
    canonical_json,
    close_intent_digest,
)
from rein_aharness.outbox.intent import (
    attempt_of_transaction,
    attempt_problem,
    entry_key,
    identifier_problem,
    intent_problems,
)

__all__ = [
    "CANCELLED",
    "FAILURE_MARKER",
    "MAX_RECORD_BYTES",
    "RECORD_FORMAT",
    "RECORD_FORMAT_V1",
    "DeliveryFailure",
    "EntryState",
    "OutboxRecord",
    "QuarantineReason",
    "RecordProblem",
    "Settlement",
    "encode_record",
    "entry_name",
    "failure_class_name",
    "key_from_name",
    "parse_record",
]

RECORD_FORMAT: Final = "rein-aharness/close-outbox-entry/v2"
RECORD_FORMAT_V1: Final = "rein-aharness/close-outbox-entry/v1"
FAILURE_MARKER: Final = "delivery_failed"
CANCELLED: Final = "cancelled"
# A bounded result (64 KiB) plus a bounded error and identifiers; anything larger was
# not written by this code and is not even read whole.
MAX_RECORD_BYTES = 2 * ops_evidence.MAX_ENCODED_BYTES + 16 * 1024

_NAME = re.compile(r"([0-9a-f]{64})\.json")
_EXCEPTION_CLASS = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")

EntryState = Literal["pending", "delivered"]
# How a delivered entry was settled: Activity Core's disposition, or `cancelled`.
Settlement = CloseDisposition | Literal["cancelled"]


class QuarantineReason(StrEnum):
    """Why something is in quarantine/: a fixed vocabulary, never file content."""

    unexpected_name = "unexpected_name"
    not_regular_file = "not_regular_file"
    unreadable = "unreadable"
    oversized = "oversized"
    unparsable = "unparsable"
    invalid_record = "invalid_record"
    not_canonical = "not_canonical"
    key_mismatch = "key_mismatch"
    intent_digest_mismatch = "intent_digest_mismatch"
    invalid_intent = "invalid_intent"
    attempt_mismatch = "attempt_mismatch"
    state_mismatch = "state_mismatch"
    conflicts_with_delivered = "conflicts_with_delivered"
    conclusive_refusal = "conclusive_refusal"
    foreign_worker_identity = "foreign_worker_identity"
    # the close's changes bundle (docs/changes.md) is gone and the landed branch it
    # would be written again from is gone too, or gives another digest
    changes_unavailable = "changes_unavailable"
    changes_digest_mismatch = "changes_digest_mismatch"


class RecordProblem(Exception):
    """A file that is not a valid entry record for the directory it is in."""

    def __init__(self, reason: QuarantineReason) -> None:
        self.reason = reason
        super().__init__(reason.value)


class DeliveryFailure(BaseModel):
    """What is kept of a failed delivery: the exception's class name and a fixed marker."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    exception_class: str = Field(pattern=_EXCEPTION_CLASS.pattern)
    marker: Literal["delivery_failed"] = FAILURE_MARKER


class OutboxRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    format: Literal[
        "rein-aharness/close-outbox-entry/v2", "rein-aharness/close-outbox-entry/v1"
    ] = RECORD_FORMAT
    key: str
    state: EntryState
    run_id: str
    transaction_id: str | None
    intent: CloseIntent
    intent_digest: str
    created_at: AwareDatetime
    attempts: int = Field(ge=0, le=1_000_000_000)
    last_attempt_at: AwareDatetime | None = None
    last_failure: DeliveryFailure | None = None
    delivered_at: AwareDatetime | None = None
    disposition: Settlement | None = None
    attempt: Attempt | None = None


def entry_name(key: str) -> str:
    return f"{key}.json"


def key_from_name(name: str) -> str | None:
    match = _NAME.fullmatch(name)
    return match.group(1) if match else None


def failure_class_name(exc: BaseException) -> str:
    """The exception's class name, cut to what DeliveryFailure accepts."""
    name = type(exc).__name__
    return name if _EXCEPTION_CLASS.fullmatch(name) else "Exception"


def encode_record(record: OutboxRecord) -> bytes:
    data = record.model_dump(mode="json")
    # A v1 record has no attempt (None in memory); a v1 file that holds one is not v1.
    if record.format == RECORD_FORMAT_V1 and data.pop("attempt") is not None:
        raise ValueError("a v1 record has no attempt")
    return canonical_json(data)


def _reject_constant(token: str) -> object:
    raise ValueError(f"non-finite JSON constant {token}")


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate object key")
    return result


def parse_record(data: bytes, *, name: str, state: EntryState) -> OutboxRecord:
    """Validate `data` as the record stored as `name` in the `state` directory."""
    key = key_from_name(name)
    if key is None:
        raise RecordProblem(QuarantineReason.unexpected_name)
    if len(data) > MAX_RECORD_BYTES:
        raise RecordProblem(QuarantineReason.oversized)
    try:
        json.loads(data, parse_constant=_reject_constant, object_pairs_hook=_unique_object)
    except (ValueError, RecursionError) as exc:
        raise RecordProblem(QuarantineReason.unparsable) from exc
    try:
        record = OutboxRecord.model_validate_json(data)
    except ValidationError as exc:
        raise RecordProblem(QuarantineReason.invalid_record) from exc
    try:
        canonical = encode_record(record)
    except ValueError as exc:
        raise RecordProblem(QuarantineReason.invalid_record) from exc
    if canonical != data:
        raise RecordProblem(QuarantineReason.not_canonical)
    if any(
        problem is not None
        for problem in (
            identifier_problem("run_id", record.run_id),
            identifier_problem("transaction_id", record.transaction_id, optional=True),
        )
    ):
        raise RecordProblem(QuarantineReason.invalid_intent)
    if record.key != key or entry_key(record.run_id, record.transaction_id) != key:
        raise RecordProblem(QuarantineReason.key_mismatch)
    if record.format == RECORD_FORMAT_V1:
        record = record.model_copy(
            update={
                "format": RECORD_FORMAT,
                "attempt": attempt_of_transaction(record.run_id, record.transaction_id),
            }
        )
    elif attempt_problem(record.run_id, record.transaction_id, record.attempt) is not None:
        raise RecordProblem(QuarantineReason.attempt_mismatch)
    if intent_problems(record.intent):
        raise RecordProblem(QuarantineReason.invalid_intent)
    if close_intent_digest(record.intent) != record.intent_digest:
        raise RecordProblem(QuarantineReason.intent_digest_mismatch)
    delivered_fields = record.delivered_at is not None
    if record.state != state or delivered_fields != (state == "delivered"):
        raise RecordProblem(QuarantineReason.state_mismatch)
    return record
