"""The v1 close intent and its digest.

A close intent is the terminal decision a worker sends to the queue: complete
with a result, or fail with an error and a reopen decision. The worker's
durable outbox keys and de-duplicates on its digest, and activity-core stores
the digest of the intent it accepted so that an exact repeat (a lost response
being retried) reconciles instead of conflicting. Both sides compute it with
:func:`close_intent_digest` and nothing else, or they would disagree.

Callers pass a ``result`` already normalized by ``ops_evidence`` and an error
already sanitized; contracts does not normalize (it must not depend on
``ops_evidence``), it only refuses what cannot be digested.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ops_contracts.canonical import canonical_json, digest_hex_of_encoded
from ops_contracts.codes import CloseAction
from ops_contracts.queue import MAX_ERROR_LENGTH, WorkerId, parsed_strict_json

__all__ = ["CLOSE_INTENT_DOMAIN", "CloseIntent", "close_intent_digest", "close_intent_encoding"]

CLOSE_INTENT_DIGEST_PREFIX = "ci1-"
CLOSE_INTENT_DOMAIN = "ops-close-intent/v1"


class CloseIntent(BaseModel):
    """One normalized terminal close decision.

    complete: ``result`` is required (the complete body requires it), ``error``
    is ``None`` and ``reopen`` is ``False``. fail: ``error`` is a non-empty
    string; ``result`` is optional.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    version: Literal[1] = 1
    action: CloseAction = Field(strict=False)
    worker_id: WorkerId
    result: dict[str, Any] | None = None
    error: str | None = Field(default=None, max_length=MAX_ERROR_LENGTH)
    reopen: bool = False

    @field_validator("version", mode="before")
    @classmethod
    def _integer_version(cls, value: object) -> object:
        # Literal[1] alone would take true and 1.0 as 1; a stored intent that
        # says either is not a v1 intent.
        if type(value) is not int:
            raise ValueError("version must be the integer 1")
        return value

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> CloseIntent:
        if self.action is CloseAction.complete:
            if self.result is None:
                raise ValueError("a complete intent needs a result")
            if self.error is not None:
                raise ValueError("a complete intent carries no error")
            if self.reopen:
                raise ValueError("a complete intent cannot reopen")
        elif not self.error:
            raise ValueError("a fail intent needs a non-empty error")
        if self.result is not None and not parsed_strict_json(info):
            # Refuse here what the digest could not encode later; a result made of
            # values a strict JSON parser produced (PARSED_STRICT_JSON) is encodable.
            canonical_json(self.result)
        return self


def close_intent_digest(intent: CloseIntent) -> str:
    """``"ci1-"`` + ``digest_hex(intent.model_dump(mode="json"), domain="ops-close-intent/v1")``.

    Every field is encoded, ``None`` values included, so the digest always
    covers the same set of keys and any change of worker, action, result,
    error or reopen decision changes it.
    """
    return close_intent_encoding(intent)[0]


def close_intent_encoding(intent: CloseIntent) -> tuple[str, bytes | None]:
    """The intent's digest (:func:`close_intent_digest`), and ``canonical_json`` of its
    result (None when it has none): the result, which is most of the intent, is encoded
    once for both, so a caller that stores the result can store that text.

    The digested text is ``canonical_json`` of what ``model_dump(mode="json")`` returns
    for a valid intent (the validator proved the result plain JSON, so the dump would
    only copy it), built around the result's own encoding: canonical JSON sorts keys, so
    ``"result"`` sits between ``"reopen"`` and ``"version"``, and a key is never
    mistaken inside a string, whose quotes are escaped (tests/test_contracts_close_intent.py
    checks the two agree)."""
    result = None if intent.result is None else canonical_json(intent.result)
    around = canonical_json(
        {
            "action": intent.action.value,
            "error": intent.error,
            "reopen": intent.reopen,
            "version": intent.version,
            "worker_id": intent.worker_id,
        }
    )
    cut = around.index(b',"version":')
    digested = around[:cut] + b',"result":' + (b"null" if result is None else result) + around[cut:]
    digest = digest_hex_of_encoded(digested, domain=CLOSE_INTENT_DOMAIN)
    return CLOSE_INTENT_DIGEST_PREFIX + digest, result
