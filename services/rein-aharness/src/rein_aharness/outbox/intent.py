"""The v1 close intent an outbox entry preserves, and the key it is filed under.

An intent is built once, right after repository work, from the run's identity and the
worker's raw outcome: the result goes through the same allowlist normalization as
Activity Core's (`ops_evidence.normalize_result`), the error through
`ops_evidence.sanitize_error`, and the outcome is then checked against the evidence
bounds. Nothing else is kept: no prompt, provider body, credential, raw tool stream or
workload callback can reach an entry, because the intent has no field to hold them.

Beside the intent, an entry carries the claim attempt its close was decided under
(fencing: Activity Core refuses a close whose attempt is not the run's current one with
`expired_lease`). The attempt is not part of the intent: the intent's digest is what
Activity Core stores and compares for reconciliation, and it must not change with the
outbox's bookkeeping. The worker's transaction id already names the attempt
(`rtx-<run-id>.<attempt>`, `transaction_id_for`); the attempt is stored explicitly all the
same, and derived from that shape only for records written before it was stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

import ops_evidence
from ops_contracts import Attempt, CloseAction, CloseIntent, close_intent_digest, digest_hex
from rein_aharness.outbox.errors import InvalidCloseIntentError

__all__ = [
    "KEY_DOMAIN",
    "PreparedClose",
    "attempt_of_transaction",
    "attempt_problem",
    "entry_key",
    "identifier_problem",
    "intent_problems",
    "prepare_close",
    "result_bound_problems",
    "transaction_id_for_attempt",
]

KEY_DOMAIN = "rein-aharness/close-outbox-key/v1"

# Run ids, transaction ids and worker ids are opaque tokens: visible ASCII, no spaces,
# at most ops_evidence.MAX_IDENTIFIER_CHARS long.
_IDENTIFIER = re.compile(r"[\x21-\x7e]+")
_TRANSACTION_PREFIX = "rtx-"
_ATTEMPT_SUFFIX = re.compile(r"\.([1-9][0-9]{0,9})")
_ATTEMPT = TypeAdapter(Attempt)


def _valid_attempt(value: object) -> bool:
    try:
        _ATTEMPT.validate_python(value, strict=True)
    except ValidationError:
        return False
    return True


@dataclass(frozen=True)
class PreparedClose:
    """A validated intent with the identity it is filed under."""

    key: str
    run_id: str
    transaction_id: str | None
    intent: CloseIntent
    intent_digest: str
    attempt: int | None = None


def identifier_problem(name: str, value: object, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if type(value) is not str:
        return f"{name}: must be a string"
    if len(value) > ops_evidence.MAX_IDENTIFIER_CHARS:
        return f"{name}: longer than {ops_evidence.MAX_IDENTIFIER_CHARS} characters"
    if not _IDENTIFIER.fullmatch(value):
        return f"{name}: must be non-empty visible ASCII without spaces"
    return None


def transaction_id_for_attempt(run_id: str, attempt: int) -> str:
    """The worker's repository transaction id of one claim attempt: `rtx-<run-id>.<attempt>`."""
    return f"{_TRANSACTION_PREFIX}{run_id}.{attempt}"


def attempt_of_transaction(run_id: str, transaction_id: str | None) -> int | None:
    """The attempt a worker transaction id of this run names, or None when it has
    another shape (then nothing can be derived, and the close is sent without one)."""
    if transaction_id is None:
        return None
    prefix = f"{_TRANSACTION_PREFIX}{run_id}"
    if not transaction_id.startswith(prefix):
        return None
    match = _ATTEMPT_SUFFIX.fullmatch(transaction_id, len(prefix))
    if match is None:
        return None
    attempt = int(match.group(1))
    return attempt if _valid_attempt(attempt) else None


def attempt_problem(run_id: str, transaction_id: str | None, attempt: object) -> str | None:
    """Why `attempt` cannot be the entry's attempt: not a contracts `Attempt`
    (1..2**31-1), or not the one its worker transaction id names (None included)."""
    if attempt is None:
        derived = attempt_of_transaction(run_id, transaction_id)
        return None if derived is None else "attempt: the transaction id names one"
    if not _valid_attempt(attempt):
        return "attempt: must be a positive 32-bit integer"
    derived = attempt_of_transaction(run_id, transaction_id)
    if derived is not None and derived != attempt:
        return "attempt: differs from the one the transaction id names"
    return None


def entry_key(run_id: str, transaction_id: str | None) -> str:
    """The entry's file key: a digest of the run id and the repository transaction id.

    `transaction_id` is None for a failure reported before repository setup began.
    """
    return digest_hex({"run_id": run_id, "transaction_id": transaction_id}, domain=KEY_DOMAIN)


def result_bound_problems(result: object) -> list[str]:
    """The evidence bounds (finite JSON, depth, collection size, string and key length,
    integer range, 64 KiB canonical encoding) as short path-and-reason strings."""
    return [
        f"result{violation.path[1:]}: {violation.reason}"
        for violation in ops_evidence.find_bound_violations(result)[:10]
    ]


def intent_problems(intent: CloseIntent) -> list[str]:
    """Why `intent` is not a bounded, normalized v1 intent (empty when it is).

    `CloseIntent` itself enforces the action rules (complete: result, no error, no
    reopen; fail: non-empty error) and the worker id pattern. This adds what the
    contract leaves to the caller, and is used both before an entry is written and when
    a stored entry is read back, so a record edited on disk into something the builder
    would never produce is caught.
    """
    problems: list[str] = []
    if intent.error is not None and ops_evidence.sanitize_error(intent.error) != intent.error:
        problems.append("error: not sanitized")
    if intent.result is not None:
        bounds = result_bound_problems(intent.result)
        problems.extend(bounds)
        if not bounds and ops_evidence.normalize_result(intent.result) != intent.result:
            problems.append("result: not normalized")
    return problems


def prepare_close(
    *,
    run_id: str,
    transaction_id: str | None,
    worker_id: str,
    action: CloseAction | str,
    result: Mapping[str, Any] | None,
    error: str | None = None,
    reopen: bool = False,
    attempt: int | None = None,
) -> PreparedClose:
    """Normalize, sanitize and bound one close; raise InvalidCloseIntentError if it is not
    a v1 intent. `result` is the raw executor result (unknown fields are dropped).

    `attempt` is the claim attempt the close was decided under; None takes the one a
    worker transaction id (`rtx-<run-id>.<n>`) names, if any. A given attempt must agree
    with that transaction id.
    """
    if attempt is None and type(run_id) is str:
        attempt = attempt_of_transaction(
            run_id, transaction_id if type(transaction_id) is str else None
        )
    problems = [
        problem
        for problem in (
            identifier_problem("run_id", run_id),
            identifier_problem("transaction_id", transaction_id, optional=True),
            identifier_problem("worker_id", worker_id),
        )
        if problem is not None
    ]
    if not problems:
        attempt_issue = attempt_problem(run_id, transaction_id, attempt)
        if attempt_issue is not None:
            problems.append(attempt_issue)
    try:
        close_action = CloseAction(action)
    except ValueError:
        problems.append("action: must be complete or fail")
    else:
        if close_action is CloseAction.complete:
            if result is None:
                problems.append("result: required to complete")
            if error is not None:
                problems.append("error: only a failure carries an error")
            if reopen:
                problems.append("reopen: only a failure can reopen")
        elif error is None:
            problems.append("error: required to fail")
    if type(reopen) is not bool:
        problems.append("reopen: must be a boolean")
    if error is not None and type(error) is not str:
        problems.append("error: must be a string")
    if result is not None and not isinstance(result, Mapping):
        problems.append("result: must be a JSON object")
    if problems:
        raise InvalidCloseIntentError(problems)
    normalized = None if result is None else ops_evidence.normalize_result(result)
    sanitized = None if error is None else ops_evidence.sanitize_error(error)
    try:
        intent = CloseIntent(
            action=close_action,
            worker_id=worker_id,
            result=normalized,
            error=sanitized,
            reopen=reopen,
        )
    except ValidationError as exc:
        fields = sorted(
            {".".join(str(part) for part in error["loc"]) or "intent" for error in exc.errors()}
        )
        raise InvalidCloseIntentError(
            [f"{field}: rejected by the v1 contract" for field in fields]
        ) from exc
    problems = intent_problems(intent)
    if problems:
        raise InvalidCloseIntentError(problems)
    return PreparedClose(
        key=entry_key(run_id, transaction_id),
        run_id=run_id,
        transaction_id=transaction_id,
        intent=intent,
        intent_digest=close_intent_digest(intent),
        attempt=attempt,
    )
