"""The brief approach's output path template: `briefs/{date}.md` and the like.

Placeholders (nothing else; no conversions or format specs):

| placeholder  | value                                                                        |
| ------------ | ---------------------------------------------------------------------------- |
| `{date}`     | the fire's date, `YYYY-MM-DD`: from a `scheduled:<iso>` triggering event id, |
|              | else the run's `created_at` in UTC                                           |
| `{run_id}`   | the ops run id                                                               |
| `{activity}` | the activity definition id (the first `:` field of the idempotency key)     |

Rendering is deterministic: the same run always names the same path. The rendered path
must be a valid repository-relative file path (contracts `repository_path_error`); the
local gateway then requires it to lie inside the run's grant before any worktree exists.
"""

from __future__ import annotations

import string
from datetime import UTC, date, datetime
from typing import Protocol

from ops_contracts import repository_path_error

__all__ = [
    "BRIEF_PLACEHOLDERS",
    "RunFacts",
    "activity_id",
    "fire_date",
    "render_output_path",
    "template_error",
]

BRIEF_PLACEHOLDERS: frozenset[str] = frozenset({"date", "run_id", "activity"})

_SAMPLE = {
    "date": "2026-01-01",
    "run_id": "00000000-0000-4000-8000-000000000000",
    "activity": "activity",
}


class RunFacts(Protocol):
    """The run fields a template reads (an `ops_contracts.OpsRun` has them all)."""

    @property
    def id(self) -> object: ...

    @property
    def idempotency_key(self) -> str: ...

    @property
    def triggering_event_id(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...


def template_error(template: str) -> str | None:
    """Why `template` is not a usable output path template, or None."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"not a valid template: {exc}"
    for _literal, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in BRIEF_PLACEHOLDERS:
            known = ", ".join(sorted("{" + p + "}" for p in BRIEF_PLACEHOLDERS))
            return f"unknown placeholder {{{name}}} (known: {known})"
        if spec or conversion:
            return f"placeholder {{{name}}} takes no conversion or format spec"
    problem = repository_path_error(template.format_map(_SAMPLE))
    return None if problem is None else f"does not render to a repository path: {problem}"


def activity_id(run: RunFacts) -> str:
    return run.idempotency_key.split(":", 1)[0]


def fire_date(run: RunFacts) -> date:
    prefix = "scheduled:"
    if run.triggering_event_id.startswith(prefix):
        try:
            return datetime.fromisoformat(run.triggering_event_id[len(prefix) :]).date()
        except ValueError:
            pass
    created = run.created_at
    if created.tzinfo is not None:
        created = created.astimezone(UTC)
    return created.date()


def render_output_path(template: str, run: RunFacts) -> str:
    """The path `template` names for `run`; ValueError if it is not a repository path."""
    path = template.format_map(
        {
            "date": fire_date(run).isoformat(),
            "run_id": str(run.id),
            "activity": activity_id(run),
        }
    )
    problem = repository_path_error(path)
    if problem is not None:
        raise ValueError(f"the brief output path does not render to a repository path: {problem}")
    return path
