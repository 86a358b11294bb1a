"""The template and reference-path language of definition files (pure).

A template is Python ``str.format`` text whose replacement fields name a value of the fire:

- ``{scheduled_for}`` / ``{fired_at}``: datetimes, formatted with a strftime spec such as
  ``{scheduled_for:%Y-%m-%d}``;
- ``{activity_id}``: the definition's slug;
- ``{context.request.<path>}`` (a manual fire's request body) and
  ``{context.schedule.<path>}`` (a scheduled fire's schedule facts): dotted paths.

Positional fields (``{}``, ``{0}``), index access (``{a[0]}``), attribute access on the
datetimes and replacement fields nested in a format spec are refused: a template names
data, it never reaches into Python objects. ``execution_refs`` values are bare dotted paths
in the same grammar (``context.request.correlation_id``).

Sync parses every template with :func:`parse_template`; emission renders the same parse,
so a template that passed sync cannot fail to parse at emission.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "CONTEXT_SCOPES",
    "DATETIME_ROOTS",
    "TEMPLATE_ROOTS",
    "Field",
    "TemplateError",
    "parse_path",
    "parse_template",
]

DATETIME_ROOTS: frozenset[str] = frozenset({"scheduled_for", "fired_at"})
TEMPLATE_ROOTS: tuple[str, ...] = ("scheduled_for", "fired_at", "activity_id", "context")
# context.request.* is a manual fire's request body; context.schedule.* a scheduled fire's.
CONTEXT_SCOPES: tuple[str, ...] = ("request", "schedule")

_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*", re.ASCII)
_CONVERSIONS = frozenset({"s", "r", "a"})
_SAMPLE_DATETIME = datetime(2000, 1, 2, 3, 4, 5, tzinfo=UTC)


class TemplateError(ValueError):
    """A template or reference path that sync refuses; the message says why."""


@dataclass(frozen=True, slots=True)
class Field:
    """One replacement field: the dotted path and how to format its value."""

    path: tuple[str, ...]
    conversion: str | None
    format_spec: str


# A template is a sequence of literal text and fields, in order.
Piece = str | Field


def parse_path(text: str) -> tuple[str, ...]:
    """Split and check a dotted reference path; raise :class:`TemplateError` if it is bad."""
    if not text or text.isdigit():
        raise TemplateError(
            "positional fields ({} or {0}) and empty paths are not allowed; "
            "name a value such as scheduled_for or context.request.title"
        )
    if "[" in text or "]" in text:
        raise TemplateError(f"'{text}': index access is not supported; use a dotted path")
    segments = tuple(text.split("."))
    for segment in segments:
        if not _SEGMENT.fullmatch(segment):
            raise TemplateError(f"'{text}': '{segment}' is not a valid path segment")
    root = segments[0]
    if root not in TEMPLATE_ROOTS:
        raise TemplateError(
            f"'{text}': unknown root '{root}'; known roots are " + ", ".join(TEMPLATE_ROOTS)
        )
    if root == "context":
        if len(segments) < 3 or segments[1] not in CONTEXT_SCOPES:
            raise TemplateError(
                f"'{text}': a context path is context.request.<name> or context.schedule.<name>"
            )
    elif len(segments) > 1:
        raise TemplateError(f"'{text}': {root} has no fields; format it with a spec instead")
    return segments


def parse_template(template: str) -> tuple[Piece, ...]:
    """Parse a template into literal text and fields, or raise :class:`TemplateError`."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"template does not parse: {exc}") from None
    pieces: list[Piece] = []
    for literal, field_name, format_spec, conversion in parsed:
        if literal:
            pieces.append(literal)
        if field_name is None:
            continue
        path = parse_path(field_name)
        spec = format_spec or ""
        if "{" in spec or "}" in spec:
            raise TemplateError(f"'{field_name}': a format spec must not contain fields")
        if conversion is not None and conversion not in _CONVERSIONS:
            raise TemplateError(f"'{field_name}': conversion must be !s, !r or !a")
        _check_spec(path, conversion, spec)
        pieces.append(Field(path, conversion, spec))
    return tuple(pieces)


def _check_spec(path: tuple[str, ...], conversion: str | None, spec: str) -> None:
    # Only values of a known type can be checked here; context values are whatever the
    # request sends, and a spec that does not fit them is refused at emission.
    root = path[0]
    if conversion is not None or not spec or root == "context":
        return
    sample: object = _SAMPLE_DATETIME if root in DATETIME_ROOTS else "activity-id"
    try:
        format(sample, spec)
    except (ValueError, TypeError) as exc:
        raise TemplateError(f"'{root}': format spec '{spec}' is invalid: {exc}") from None
