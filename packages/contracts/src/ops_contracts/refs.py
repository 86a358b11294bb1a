"""The attribution keys an ops run may carry in ``execution_refs``.

Attribution refs tie a run to the request, goal or initiative that caused it.
They are carried through, never authored by the queue, and anything beyond this
allowlist (credentials, prompts, repository authority) must not ride along:
definition sync rejects other keys and emission copies only these.
"""

from __future__ import annotations

__all__ = ["ATTRIBUTION_REF_KEYS"]

ATTRIBUTION_REF_KEYS: tuple[str, ...] = (
    "correlation_id",
    "causation_id",
    "goal_refs",
    "initiative_refs",
    "request_ref",
)
