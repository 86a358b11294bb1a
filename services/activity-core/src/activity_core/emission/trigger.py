"""The per-fire triggering event id of an emission (pure).

The idempotency key of an ops run is ``{activity_id}:{source_id}:{triggering_event_id}``.
A Temporal schedule starts every fire with the same sentinel ``trigger_key="scheduled"``;
used as the event id, it gave every fire after the first the key of the first, so only
the first weekday created an ops run and later days left the claim queue empty. A
scheduled fire is therefore identified by its nominal time, or failing that by its run id.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["SCHEDULED_TRIGGER_KEY", "emit_triggering_event_id", "scheduled_event_id"]

SCHEDULED_TRIGGER_KEY = "scheduled"


def scheduled_event_id(scheduled_for: datetime) -> str:
    """``scheduled:`` + the fire's nominal time as ISO 8601 in UTC (``...+00:00``).

    A naive datetime is taken to be UTC already. Normalizing the zone means one fire has
    one id however the time reached us (Temporal's UTC, or a local wall-clock time).
    """
    moment = (
        scheduled_for.replace(tzinfo=UTC)
        if scheduled_for.tzinfo is None
        else scheduled_for.astimezone(UTC)
    )
    return f"{SCHEDULED_TRIGGER_KEY}:{moment.isoformat()}"


def emit_triggering_event_id(trigger_key: str, scheduled_for: datetime | None, run_id: str) -> str:
    """The triggering event id of one fire; never the bare sentinel ``scheduled``.

    - ``trigger_key == "scheduled"``: ``scheduled:{scheduled_for in UTC}`` when the nominal
      time is known, else ``run_id`` (unique per workflow run);
    - any other key (a manual fire carries a unique one) is already per-fire: unchanged.
    """
    if not trigger_key:
        raise ValueError("a fire needs a trigger key")
    if trigger_key != SCHEDULED_TRIGGER_KEY:
        return trigger_key
    if scheduled_for is not None:
        return scheduled_event_id(scheduled_for)
    if not run_id or run_id == SCHEDULED_TRIGGER_KEY:
        raise ValueError("a scheduled fire without a scheduled time needs its run id")
    return run_id
