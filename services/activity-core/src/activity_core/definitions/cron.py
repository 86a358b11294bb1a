"""A small, pure validator for the 5-field cron expressions of definition schedules.

``minute hour day-of-month month day-of-week``, separated by whitespace. Each field is a
comma-separated list of items; an item is ``*``, a value, or a range ``a-b``, each
optionally followed by a step ``/n`` (``*/15``, ``1-5/2``). Months also take ``jan``-``dec``
and days of the week ``sun``-``sat`` (case-insensitive), as single values or range ends.
Day of week 0 and 7 both mean Sunday.

Stricter than some cron dialects on purpose: no macros (``@daily``), no seconds or year
field, no ``?``, ``L``, ``W`` or ``#``, no bare ``a/n``. What passes here is understood
the same way by every cron implementation, including Temporal's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CronError", "validate_cron"]


# ASCII digits only: str.isdigit() also accepts "²" and other digits int() refuses.
_NUMBER = re.compile(r"[0-9]{1,4}", re.ASCII)


class CronError(ValueError):
    """An invalid cron expression; the message names the field and the problem."""


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] stands for low + i


_FIELDS: tuple[_FieldSpec, ...] = (
    _FieldSpec("minute", 0, 59),
    _FieldSpec("hour", 0, 23),
    _FieldSpec("day-of-month", 1, 31),
    _FieldSpec(
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    _FieldSpec("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)


def validate_cron(expression: str) -> None:
    """Raise :class:`CronError` unless ``expression`` is a valid 5-field cron expression."""
    fields = expression.split()
    if len(fields) != len(_FIELDS):
        raise CronError(
            f"cron must have 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)}"
        )
    for text, spec in zip(fields, _FIELDS, strict=True):
        for item in text.split(","):
            _check_item(item, spec)


def _check_item(item: str, spec: _FieldSpec) -> None:
    where = f"{spec.name} field '{item}'"
    if not item:
        raise CronError(f"{spec.name} field has an empty list item")
    base, slash, step = item.partition("/")
    if slash:
        if not _NUMBER.fullmatch(step) or int(step) == 0:
            raise CronError(f"{where}: step must be a positive integer")
        if int(step) > spec.high:
            raise CronError(f"{where}: step {step} is larger than the field's range")
        if base != "*" and "-" not in base:
            raise CronError(f"{where}: a step needs '*' or a range before '/'")
    if base == "*":
        return
    low_text, dash, high_text = base.partition("-")
    low = _value(low_text, spec, where)
    if dash:
        high = _value(high_text, spec, where)
        if low > high:
            raise CronError(f"{where}: range start {low_text} is after its end {high_text}")


def _value(text: str, spec: _FieldSpec, where: str) -> int:
    if _NUMBER.fullmatch(text):
        value = int(text)
        if not spec.low <= value <= spec.high:
            raise CronError(f"{where}: {text} is out of range {spec.low}-{spec.high}")
        return value
    lowered = text.lower()
    if lowered in spec.names:
        return spec.low + spec.names.index(lowered)
    if spec.names:
        raise CronError(
            f"{where}: '{text}' is neither a number {spec.low}-{spec.high} nor a name "
            f"({', '.join(spec.names)})"
        )
    raise CronError(f"{where}: '{text}' is not a number {spec.low}-{spec.high}")
