"""Render the ops UI templates. Autoescape is always on: every value is text, never markup,
and every value is shown display-safe (display_text.py: no control, bidi or other
invisible formatting character reaches a page)."""

from __future__ import annotations

import re
import urllib.parse
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from activity_core.ui.display_text import display_text

__all__ = ["render", "stylesheet"]

_STATE_CLASSES = frozenset(
    {"open", "claimed", "succeeded", "failed", "expired", "started", "emitted"}
    | {"queued", "running", "stalled"}
    | {"pending", "written"}
)


def _when(value: datetime | str | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        # a time inside a jsonb value (the run's publication) arrives as ISO text
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return value
        return _when(parsed)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat()


def _age(seconds: float | None) -> str:
    """A duration the way an operator says it: 42 s, 5 min, 3 h 12 min, 2 d 4 h."""
    if seconds is None:
        return "—"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


_URL_SAFE_REF = re.compile(r"[A-Za-z0-9._~-]{1,200}")


def _segment(value: object) -> str:
    """One URL path segment: every reserved character, `/` included, percent-encoded."""
    return urllib.parse.quote(str(value), safe="")


def _fire_ref(fire: Any) -> str:
    """How a page links to a fire: its run id when that is a plain token, else its UUID."""
    run_id = str(fire.run_id)
    return run_id if _URL_SAFE_REF.fullmatch(run_id) else str(fire.id)


def _state_class(value: object) -> str:
    # Only known states become class names; anything else gets the neutral style.
    text = str(value)
    return f"s-{text}" if text in _STATE_CLASSES else "s-other"


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("activity_core.ui", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=display_text,
    )
    env.filters["when"] = _when
    env.filters["iso"] = _iso
    env.filters["age"] = _age
    env.filters["state_class"] = _state_class
    env.filters["seg"] = _segment
    env.filters["fire_ref"] = _fire_ref
    return env


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)


@cache
def stylesheet() -> bytes:
    return resources.files("activity_core.ui").joinpath("static/ops.css").read_bytes()
