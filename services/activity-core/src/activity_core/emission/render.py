"""Rendering a rule's templates and attribution refs against one fire (pure).

Values a template can name (see ``definitions/templates.py``):

- ``scheduled_for``: the fire's nominal time; for a manual fire, its ``fired_at``;
- ``fired_at``: when the fire started;
  both in the definition's schedule time zone when it has one (a 00:30 Berlin fire is
  dated in Berlin, not in UTC), else UTC;
- ``activity_id``: the definition's slug;
- ``context.request.*`` / ``context.schedule.*``: the fire's context.

An unresolved path renders as the empty string in a template and leaves the key absent in
``execution_refs``. Only ``ATTRIBUTION_REF_KEYS`` are carried. The repository grant is not
an input here: it is copied as admitted by emission, never rendered, never merged into refs.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from activity_core.definitions.model import LIST_REF_KEYS, ActionFields
from activity_core.definitions.templates import Field, TemplateError, parse_path, parse_template
from activity_core.emission.fire import FireContext
from ops_contracts import ATTRIBUTION_REF_KEYS, canonical_json

__all__ = [
    "MAX_DESCRIPTION",
    "MAX_REF_LENGTH",
    "MAX_TITLE",
    "RenderError",
    "RenderedTask",
    "fire_values",
    "render_task",
    "render_template",
    "resolve_execution_refs",
]

MAX_TITLE = 500
MAX_DESCRIPTION = 100_000
# An attribution ref is an identifier, not a payload; a longer value counts as unresolved.
MAX_REF_LENGTH = 512

_MISSING = object()


class RenderError(ValueError):
    """A template that cannot be rendered with this fire's values (e.g. a format spec that
    does not fit a context value). Deterministic, so emission treats it as a policy error."""


@dataclass(frozen=True, slots=True)
class RenderedTask:
    title: str
    description: str
    execution_refs: dict[str, str | list[str]]


def fire_values(
    *, activity_id: str, fire: FireContext, timezone: str | None = None
) -> dict[str, Any]:
    """The root values templates and refs resolve against."""
    zone: tzinfo = zoneinfo.ZoneInfo(timezone) if timezone else UTC
    fired_at = _in_zone(fire.fired_at, zone)
    scheduled_for = _in_zone(fire.scheduled_for, zone) if fire.scheduled_for else fired_at
    return {
        "scheduled_for": scheduled_for,
        "fired_at": fired_at,
        "activity_id": activity_id,
        "context": fire.context,
    }


def _in_zone(moment: datetime, zone: tzinfo) -> datetime:
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
    return aware.astimezone(zone)


def _resolve(path: Sequence[str], values: Mapping[str, Any]) -> Any:
    current: Any = values
    for segment in path:
        if not isinstance(current, Mapping) or segment not in current:
            return _MISSING
        current = current[segment]
    return _MISSING if current is None else current


def render_template(template: str, values: Mapping[str, Any]) -> str:
    try:
        pieces = parse_template(template)
    except TemplateError as exc:
        raise RenderError(str(exc)) from None
    out: list[str] = []
    for piece in pieces:
        if not isinstance(piece, Field):
            out.append(piece)
            continue
        value = _resolve(piece.path, values)
        if value is _MISSING:
            continue
        out.append(_format(piece, value))
    return "".join(out)


def _format(field: Field, value: Any) -> str:
    name = ".".join(field.path)
    if isinstance(value, Mapping | list) and field.conversion is None:
        try:
            value = canonical_json(value).decode("utf-8")
        except ValueError:
            value = str(value)
    if field.conversion == "r":
        value = repr(value)
    elif field.conversion == "a":
        value = ascii(value)
    elif field.conversion == "s":
        value = str(value)
    try:
        return format(value, field.format_spec)
    except (ValueError, TypeError) as exc:
        raise RenderError(
            f"{{{name}}}: format spec '{field.format_spec}' does not fit "
            f"a {type(value).__name__} value: {exc}"
        ) from None


def _storable(text: str) -> str:
    """Text PostgreSQL can store: no NUL, no unpaired surrogate (replaced by U+FFFD)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text


def _ref_value(value: Any) -> list[str]:
    if isinstance(value, bool):
        return []
    if isinstance(value, str):
        # an identifier, not text: one with control characters or surrogates is not a ref
        usable = 0 < len(value) <= MAX_REF_LENGTH and value.isprintable()
        return [value] if usable and _storable(value) == value else []
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, list):
        return [item for v in value if isinstance(v, str) for item in _ref_value(v)]
    return []


def resolve_execution_refs(
    refs: Mapping[str, str | Sequence[str]], values: Mapping[str, Any]
) -> dict[str, str | list[str]]:
    """Resolve each allowlisted key's path(s); an unresolved key is left out.

    ``goal_refs`` / ``initiative_refs`` become lists of strings (a path that resolves to a
    list contributes its strings); the other keys take the single string their path names.
    """
    resolved: dict[str, str | list[str]] = {}
    for key, spec in refs.items():
        if key not in ATTRIBUTION_REF_KEYS:
            continue
        paths = [spec] if isinstance(spec, str) else list(spec)
        found: list[str] = []
        for path in paths:
            try:
                segments = parse_path(path)
            except TemplateError:
                continue
            value = _resolve(segments, values)
            if value is not _MISSING:
                found.extend(_ref_value(value))
        if not found:
            continue
        if key in LIST_REF_KEYS:
            resolved[key] = list(dict.fromkeys(found))
        elif len(found) == 1:
            resolved[key] = found[0]
    return resolved


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def render_task(
    action: ActionFields, *, activity_id: str, title: str, fire: FireContext, timezone: str | None
) -> RenderedTask:
    """Title, description and attribution refs of one task; ``title`` (the definition's)
    stands in when the task template renders empty."""
    values = fire_values(activity_id=activity_id, fire=fire, timezone=timezone)
    rendered_title = render_template(action.task_template or "", values).strip()
    description = render_template(action.description_template or "", values)
    return RenderedTask(
        title=_bounded(_storable(rendered_title) or title, MAX_TITLE),
        description=_bounded(_storable(description), MAX_DESCRIPTION),
        execution_refs=resolve_execution_refs(action.execution_refs, values),
    )
