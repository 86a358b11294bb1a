"""HTTP bodies of the ops-run claim queue.

Request bodies are strict: an unknown top-level field, ``"1"`` or ``true``
where an integer belongs, an out-of-range bound, or a non-finite number
anywhere (``result`` included) is a 422, never a silent coercion. Enum fields
are the exception to strictness only in accepting their JSON string value from
a parsed ``dict`` as well as from raw JSON.

Unknown fields *inside* ``result`` are allowed here: ``ops_evidence``
normalization drops them before anything is stored, so refusing them would
only break producers that are newer than the queue.

Response models describe what the queue answers (and OpenAPI documents); they
ignore unknown fields so an older worker keeps working against a newer queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from ops_contracts.canonical import canonical_json
from ops_contracts.codes import (
    CloseDisposition,
    LabelsMode,
    Priority,
    RefusalCode,
    RunState,
    SourceType,
)

__all__ = [
    "MAX_ERROR_LENGTH",
    "MAX_LABEL_LENGTH",
    "MAX_LEASE_SECONDS",
    "PARSED_STRICT_JSON",
    "Attempt",
    "ClaimRequest",
    "ClaimResponse",
    "CloseResponse",
    "CompleteRequest",
    "ErrorBody",
    "ExpireLeasesResponse",
    "FailRequest",
    "FieldError",
    "HeartbeatRequest",
    "Label",
    "OpsRun",
    "PublishResponse",
    "RunPage",
    "RunPublication",
    "WorkerId",
    "label_error",
    "parsed_strict_json",
]

MAX_LEASE_SECONDS = 86_400
MAX_CLAIM_LIMIT = 100
MAX_WAIT_SECONDS = 20
MAX_CLAIM_LABELS = 20
MAX_ERROR_LENGTH = 4096
MAX_ATTEMPT = 2**31 - 1

# Fencing: the attempt a heartbeat or close belongs to (the run's `attempt` when it was
# claimed). Optional so that older workers keep working; when present and not the run's
# current attempt, the queue answers 409 expired_lease and changes nothing, so a close
# decided under attempt 1 can never land on attempt 2 of the same worker.
Attempt = Annotated[int, Field(ge=1, le=MAX_ATTEMPT)]
_ATTEMPT_DOC = (
    "Fencing: the run's `attempt` from the claim this request belongs to. When present "
    "and not the run's current attempt, the answer is 409 expired_lease and nothing "
    "changes (checked where expired_lease stands in the order of refusals). Omitted: "
    "not checked."
)

# Non-secret worker identity, e.g. "rein-aharness@railiance01". Bounded and
# free of whitespace so it is safe in logs, rows and lock keys.
WorkerId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._@:/+-]{1,200}$")]

# The one label grammar: what a definition may declare, emission stores, a claim filters
# by, `GET /ops-runs?label=` lists by and the worker's `--labels L,...` takes (see
# label_error). Printable so a label is safe in logs and on the operator's pages; no
# whitespace so it survives any list syntax; no comma because the worker CLI separates
# labels with commas. 100 characters because claims accepted that many before the
# grammars were made one (a contract is extended, never narrowed).
MAX_LABEL_LENGTH = 100
# What JSON Schema can say of the grammar (no Unicode categories in its regexes): the
# validator, label_error, also refuses the other non-printable characters.
_LABEL_SCHEMA_PATTERN = r"^[^\s,\x00-\x1f\x7f-\x9f]+$"


def label_error(value: str) -> str | None:
    """Why ``value`` is not a label, or None when it is one: 1-100 characters, each
    printable (``str.isprintable``: no control, format, surrogate, private-use or
    unassigned code point), none of them whitespace or a comma."""
    if not value or len(value) > MAX_LABEL_LENGTH:
        return f"a label must be 1-{MAX_LABEL_LENGTH} characters"
    if any(ch.isspace() or ch == "," or not ch.isprintable() for ch in value):
        return "a label must not contain whitespace, commas or non-printable characters"
    return None


def _label(value: str) -> str:
    problem = label_error(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Label = Annotated[
    str,
    AfterValidator(_label),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_LABEL_LENGTH,
            "pattern": _LABEL_SCHEMA_PATTERN,
            "description": (f"1-{MAX_LABEL_LENGTH} printable characters, no whitespace, no comma"),
        }
    ),
]

_REQUEST_CONFIG = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


# The validation context of a model validated from values that a strict JSON parser
# produced (string keys only, no NaN or Infinity, no unpaired surrogate, nesting far below
# the recursion limit: activity-core's body guard), or that were made of such values by
# picking and cutting them (a normalized result). Such a value is finite JSON by
# construction, so the result's finite-JSON check, which encodes the whole result, is
# skipped: `CompleteRequest.model_validate(value, context=PARSED_STRICT_JSON)`; the same
# for CloseIntent.
PARSED_STRICT_JSON: Mapping[str, bool] = MappingProxyType({"parsed_strict_json": True})


def parsed_strict_json(info: ValidationInfo) -> bool:
    """The model is validated under PARSED_STRICT_JSON."""
    return bool(info.context and info.context.get("parsed_strict_json"))


def _require_finite_json(
    value: dict[str, Any] | None, info: ValidationInfo
) -> dict[str, Any] | None:
    # allow_inf_nan covers float fields only; a result is free-form, so check
    # that it is plain finite JSON that canonical_json (and so a close-intent
    # digest) can encode.
    if value is not None and not parsed_strict_json(info):
        try:
            canonical_json(value)
        except ValueError as exc:
            raise ValueError(f"result must be finite JSON: {exc}") from exc
    return value


class ClaimRequest(BaseModel):
    """``POST /ops-runs/claim``; omit ``labels`` to claim any open run."""

    model_config = _REQUEST_CONFIG

    worker_id: WorkerId
    labels: list[Label] | None = Field(default=None, min_length=1, max_length=MAX_CLAIM_LABELS)
    labels_mode: LabelsMode = Field(default=LabelsMode.any, strict=False)
    limit: int = Field(default=1, ge=1, le=MAX_CLAIM_LIMIT)
    # None: the server's OPS_RUN_LEASE_SECONDS.
    lease_seconds: int | None = Field(default=None, ge=1, le=MAX_LEASE_SECONDS)
    # Long-poll budget; bounded so a claim never outlives proxy timeouts.
    wait_seconds: int = Field(default=0, ge=0, le=MAX_WAIT_SECONDS)


class HeartbeatRequest(BaseModel):
    """``POST /ops-runs/{id}/heartbeat``: the new lease runs from now."""

    model_config = _REQUEST_CONFIG

    worker_id: WorkerId
    lease_seconds: int | None = Field(default=None, ge=1, le=MAX_LEASE_SECONDS)
    attempt: Attempt | None = Field(default=None, description=_ATTEMPT_DOC)


class CompleteRequest(BaseModel):
    """``POST /ops-runs/{id}/complete``; ``result`` may be a whole ``GatewayResult``."""

    model_config = _REQUEST_CONFIG

    worker_id: WorkerId
    result: dict[str, Any]
    attempt: Attempt | None = Field(default=None, description=_ATTEMPT_DOC)

    _finite_result = field_validator("result")(_require_finite_json)


class FailRequest(BaseModel):
    """``POST /ops-runs/{id}/fail``; ``reopen`` asks for another attempt."""

    model_config = _REQUEST_CONFIG

    worker_id: WorkerId
    error: str = Field(min_length=1, max_length=MAX_ERROR_LENGTH)
    reopen: bool = False
    result: dict[str, Any] | None = None
    attempt: Attempt | None = Field(default=None, description=_ATTEMPT_DOC)

    _finite_result = field_validator("result")(_require_finite_json)


class RunPublication(BaseModel):
    """An operator's publication of a run's changes (docs/changes.md, Publication):
    ``pending`` (its workflow runs), ``published`` (``ref`` is on the remote at
    ``commit``, the run's head_after) or ``failed`` (``error`` says why; nothing was
    overwritten; publishing again starts anew). A published one's ``error`` says that
    its pull request could not be opened."""

    state: Literal["pending", "published", "failed"]
    ref: str
    commit: str | None = None
    pull_request_url: str | None = None
    error: str | None = None
    requested_by: str
    requested_at: datetime
    published_at: datetime | None = None


class PublishResponse(BaseModel):
    """What ``POST /ops-runs/{id}/publish`` answers: the run's publication."""

    run_id: UUID
    publication: RunPublication


class OpsRun(BaseModel):
    """A run projection: every stored field except ``close_intent_digest``.

    ``repository_grant`` is the admitted grant exactly as queued (see
    ``RepositoryGrantV1.as_admitted``); ``result`` is normalized evidence.
    """

    id: UUID
    activity_definition_id: UUID
    idempotency_key: str
    target_repo: str
    title: str
    description: str
    labels: list[str]
    priority: Priority
    state: RunState
    claim_owner: str | None
    lease_until: datetime | None
    attempt: int
    source_type: SourceType
    source_id: str
    triggering_event_id: str
    approach_hint: str | None
    harness_profile_ref: str | None
    execution_refs: dict[str, Any]
    repository_grant: dict[str, Any] | None
    result: dict[str, Any] | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    # The operator plane (additive; older readers ignore them, older queues omit them).
    requeued_from: UUID | None = Field(
        default=None,
        description="the failed or expired run this one was requeued from; absent otherwise",
    )
    requeued_as: list[UUID] = Field(
        default_factory=list,
        description="the runs requeued from this one, oldest first (computed, never stored "
        "on this row); empty for every run that is not failed or expired",
    )
    cancelled_by: str | None = Field(
        default=None,
        description="the operator who cancelled the run (its state is then failed); absent "
        "otherwise",
    )
    publication: RunPublication | None = Field(
        default=None,
        description="the publication of the run's changes an operator asked for; absent "
        "when none was",
    )


class CloseResponse(OpsRun):
    """What complete/fail answer: the run after the close, and how it was taken."""

    close_disposition: CloseDisposition


class ClaimResponse(BaseModel):
    runs: list[OpsRun]


class RunPage(BaseModel):
    """One keyset page of ``GET /ops-runs``; ``next_cursor`` is ``None`` on the last."""

    runs: list[OpsRun]
    next_cursor: str | None


class ExpireLeasesResponse(BaseModel):
    reopened: int
    expired: int


class FieldError(BaseModel):
    """One bad field of a 422 ``invalid_request``."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every non-2xx body of the JSON API."""

    code: RefusalCode
    detail: str
    errors: list[FieldError] | None = None
