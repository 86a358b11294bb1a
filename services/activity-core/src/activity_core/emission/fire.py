"""What one fire of an activity hands to emission."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["FireContext"]


@dataclass(frozen=True, slots=True)
class FireContext:
    """One fire: which run, which per-fire event, when, and the template context.

    ``triggering_event_id`` is already per-fire (see ``trigger.emit_triggering_event_id``);
    ``context`` is ``{"request": {...}}`` for a manual fire (the operator's request body)
    or ``{"schedule": {...}}`` for a scheduled one. ``activity_run_id`` is the
    ``activity_runs`` row the audit rows point at, when the fire recorded one.
    """

    activity_run_id: uuid.UUID | None
    run_id: str
    trigger_key: str
    triggering_event_id: str
    scheduled_for: datetime | None
    fired_at: datetime
    context: Mapping[str, Any] = field(default_factory=dict)
