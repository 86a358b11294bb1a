"""What a run's close says, decided from its execution (pure).

| execution                                       | close                                   |
| ----------------------------------------------- | --------------------------------------- |
| GatewayResult with `ok: true`                   | complete, result = the whole GatewayResult |
| GatewayResult with `ok: false` (remote Glas)    | fail, reopen only for `timed_out`       |
| GatewayError (refused, rejected, failed, ...)   | fail with its reason and reopen decision, |
|                                                 | and its evidence when it has some       |
| refused before execution (profile, grant)       | fail, no reopen, no result              |
| legacy approach ran                             | complete with the executor result       |

Errors are sanitized by the outbox (`ops_evidence.sanitize_error`) and results
normalized by the allowlist before anything is stored or sent, so a command's output can
never travel in a close even if a result carried it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ops_contracts import CloseAction, GatewayResult, gateway_result_payload
from rein_aharness.gateway.errors import GatewayError

__all__ = [
    "CloseDecision",
    "complete_with",
    "decision_for_error",
    "decision_for_result",
    "refusal",
]


@dataclass(frozen=True)
class CloseDecision:
    action: CloseAction
    result: dict[str, Any] | None
    error: str | None = None
    reopen: bool = False


def complete_with(result: dict[str, Any]) -> CloseDecision:
    return CloseDecision(CloseAction.complete, result)


def refusal(reason: str) -> CloseDecision:
    return CloseDecision(CloseAction.fail, None, error=reason, reopen=False)


def decision_for_result(result: GatewayResult) -> CloseDecision:
    payload = gateway_result_payload(result)
    if result.ok:
        return complete_with(payload)
    outcome = result.evidence.outcome
    return CloseDecision(
        CloseAction.fail,
        payload,
        error=f"glas reported outcome {outcome}",
        reopen=outcome == "timed_out",
    )


def decision_for_error(error: GatewayError) -> CloseDecision:
    payload = gateway_result_payload(error.result) if error.result is not None else None
    return CloseDecision(CloseAction.fail, payload, error=error.reason, reopen=error.reopen)
