"""The context a fire hands to emission: pure, so the workflow and its tests agree on it.

Templates resolve `context.request.*` for a manual fire (the operator's request body) and
`context.schedule.*` for a scheduled one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from activity_core.temporal.payloads import RunActivityInput

__all__ = ["fire_context"]


def fire_context(params: RunActivityInput, scheduled_for: datetime | None) -> dict[str, Any]:
    if params.request is not None:
        return {"request": dict(params.request)}
    schedule: dict[str, Any] = {}
    if scheduled_for is not None:
        schedule["scheduled_for"] = scheduled_for.isoformat()
    return {"schedule": schedule}
