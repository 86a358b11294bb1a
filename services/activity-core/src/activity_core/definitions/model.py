"""The activity definition file, as typed models (the YAML shape of the spec's README).

```yaml
id: fi-daily-brief                  # slug; the definition's UUID is definition_uuid(id)
title: FI daily brief
schedule: {cron: "0 6 * * 1-5", timezone: Europe/Berlin}   # omitted: manual fires only
paused: false                       # optional; a paused definition's schedule is paused
rules:
  - id: daily-brief                 # source_type=rule, source_id=daily-brief
    action: {task_template: ..., target_repo: ..., harness_profile_ref: ..., ...}
instructions:
  - id: weekly-digest               # source_type=instruction
    report_only: true               # a deterministic report: creates no execution request
    task_template: ...              # the action fields sit at instruction level
```

Every string field is a YAML *string*: a number or boolean where text is expected is an
error, never coerced (``version: 1`` in a grant is refused by the grant rules for the same
reason). Unknown keys are errors at every level. Field-level rules (slug, cron, timezone,
templates, profile-ref structure, attribution keys, the repository grant) are checked here
so pydantic reports all of them in one pass; rules that relate several fields (a required
profile ref, duplicate ids) live in ``validate.py``.
"""

from __future__ import annotations

import re
import uuid
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictStr,
)

from activity_core.definitions.cron import validate_cron
from activity_core.definitions.templates import parse_path, parse_template
from ops_contracts import (
    ATTRIBUTION_REF_KEYS,
    Priority,
    RepositoryGrantV1,
    SourceType,
    digest_hex,
    harness_profile_ref_error,
    label_error,
)

__all__ = [
    "DEFINITION_NAMESPACE",
    "LIST_REF_KEYS",
    "SLUG_PATTERN",
    "ActionFields",
    "ActivityDefinitionSpec",
    "Instruction",
    "NestedFieldError",
    "Rule",
    "Schedule",
    "SubProblem",
    "TaskSource",
    "definition_uuid",
]

# uuid5(NAMESPACE_URL, "urn:ops-queue:activity-core:activity-definition"), frozen here as a
# literal: every definition's UUID is uuid5(DEFINITION_NAMESPACE, slug), so the same slug
# names the same row on every deployment and after every re-sync. Never change it: rows,
# ops_runs and Temporal schedules are keyed by the UUIDs it produces.
DEFINITION_NAMESPACE = uuid.UUID("431095a1-708a-517b-9e08-011b3cc4b7a8")

SLUG_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,127}$"
_SLUG = re.compile(SLUG_PATTERN, re.ASCII)
# org/repo on the Forgejo instance that artefact links point at
_TARGET_REPO = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
_MAX_TITLE = 200
_MAX_TASK_TEMPLATE = 1_000
_MAX_DESCRIPTION_TEMPLATE = 20_000
_MAX_LABELS = 32
_MAX_HINT = 256

# Attribution keys that carry several refs (list of paths); the others carry exactly one.
LIST_REF_KEYS: frozenset[str] = frozenset({"goal_refs", "initiative_refs"})


def definition_uuid(slug: str) -> uuid.UUID:
    """The stable UUID of the definition with this slug (see DEFINITION_NAMESPACE)."""
    return uuid.uuid5(DEFINITION_NAMESPACE, slug)


@dataclass(frozen=True, slots=True)
class SubProblem:
    """A problem below a field: ``path`` is relative to it (``""`` is the field itself)."""

    path: str
    message: str


class NestedFieldError(ValueError):
    """Several problems inside one field, each at its own sub-path."""

    def __init__(self, problems: Sequence[SubProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"{p.path or '$'}: {p.message}" for p in self.problems))


# --- field checks (each returns the value or raises ValueError) ------------------------


def _slug(value: str) -> str:
    if not _SLUG.fullmatch(value):
        raise ValueError(
            "must be a slug: 1-128 characters of a-z, 0-9, '.', '_', '-', "
            "starting with a letter or digit"
        )
    return value


def _bounded_text(limit: int) -> AfterValidator:
    def check(value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        if len(value) > limit:
            raise ValueError(f"must be at most {limit} characters")
        return value

    return AfterValidator(check)


def _template(limit: int) -> AfterValidator:
    def check(value: str) -> str:
        if len(value) > limit:
            raise ValueError(f"must be at most {limit} characters")
        parse_template(value)
        return value

    return AfterValidator(check)


def _cron(value: str) -> str:
    validate_cron(value)
    return value


def _timezone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"'{value}' is not an IANA time zone (e.g. Europe/Berlin)") from None
    return value


def _target_repo(value: str) -> str:
    if not _TARGET_REPO.fullmatch(value) or ".." in value:
        raise ValueError("must be <org>/<repo> (letters, digits, '.', '_', '-')")
    return value


def _contract_grammar(problem_of: Callable[[str], str | None]) -> AfterValidator:
    """A value checked by ops_contracts' own grammar (`problem_of` names what is wrong, or
    None), so a definition accepts exactly what the queue's API accepts."""

    def check(value: str) -> str:
        problem = problem_of(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def _unique_labels(value: tuple[str, ...]) -> tuple[str, ...]:
    if len(value) > _MAX_LABELS:
        raise ValueError(f"at most {_MAX_LABELS} labels")
    seen: dict[str, int] = {}
    problems = []
    for index, label in enumerate(value):
        if label in seen:
            problems.append(SubProblem(f"[{index}]", f"duplicate of labels[{seen[label]}]"))
        seen.setdefault(label, index)
    if problems:
        raise NestedFieldError(problems)
    return value


def _execution_refs(value: Any) -> dict[str, str | list[str]]:
    """Attribution key -> dotted context path (or, for *_refs keys, a list of paths)."""
    if not isinstance(value, Mapping):
        raise ValueError("must be a mapping of attribution keys to context paths")
    problems: list[SubProblem] = []
    refs: dict[str, str | list[str]] = {}
    for key, raw in value.items():
        if not isinstance(key, str) or key not in ATTRIBUTION_REF_KEYS:
            problems.append(
                SubProblem(
                    f".{key}",
                    "unknown attribution key; allowed: " + ", ".join(ATTRIBUTION_REF_KEYS),
                )
            )
            continue
        if isinstance(raw, list):
            if key not in LIST_REF_KEYS:
                problems.append(SubProblem(f".{key}", "takes one path, not a list"))
                continue
            if not raw:
                problems.append(SubProblem(f".{key}", "must list at least one path"))
                continue
            paths: list[str] = []
            for index, item in enumerate(raw):
                problem = _path_problem(item)
                if problem is not None:
                    problems.append(SubProblem(f".{key}[{index}]", problem))
                else:
                    paths.append(item)
            refs[key] = paths
            continue
        problem = _path_problem(raw)
        if problem is not None:
            problems.append(SubProblem(f".{key}", problem))
        else:
            refs[key] = raw
    if problems:
        raise NestedFieldError(problems)
    return refs


def _path_problem(raw: object) -> str | None:
    if not isinstance(raw, str):
        return "must be a dotted path string such as context.request.correlation_id"
    try:
        parse_path(raw)
    except ValueError as exc:
        return str(exc)
    return None


Slug = Annotated[StrictStr, AfterValidator(_slug)]
Title = Annotated[StrictStr, _bounded_text(_MAX_TITLE)]
Hint = Annotated[StrictStr, _bounded_text(_MAX_HINT)]
TaskTemplate = Annotated[StrictStr, _template(_MAX_TASK_TEMPLATE)]
DescriptionTemplate = Annotated[StrictStr, _template(_MAX_DESCRIPTION_TEMPLATE)]
Cron = Annotated[StrictStr, AfterValidator(_cron)]
TimeZone = Annotated[StrictStr, AfterValidator(_timezone)]
ProfileRef = Annotated[StrictStr, _contract_grammar(harness_profile_ref_error)]
TargetRepo = Annotated[StrictStr, AfterValidator(_target_repo)]
# the one label grammar (ops_contracts.Label), so whatever a definition declares can be
# claimed and listed by
Label = Annotated[StrictStr, _contract_grammar(label_error)]
Labels = Annotated[tuple[Label, ...], AfterValidator(_unique_labels)]
ExecutionRefs = Annotated[dict[str, str | list[str]], PlainValidator(_execution_refs)]


# --- the models ---------------------------------------------------------------------------

_CONFIG = ConfigDict(extra="forbid", frozen=True)


class Schedule(BaseModel):
    model_config = _CONFIG

    cron: Cron
    timezone: TimeZone


class ActionFields(BaseModel):
    """What one rule or instruction emits. ``task_template`` and ``target_repo`` are
    required for anything that creates an execution request (checked in validate.py)."""

    model_config = _CONFIG

    task_template: TaskTemplate | None = None
    description_template: DescriptionTemplate | None = None
    target_repo: TargetRepo | None = None
    labels: Labels = ()
    priority: Priority = Priority.medium
    # the authoritative execution selector, pinned <id>@<version>
    harness_profile_ref: ProfileRef | None = None
    # legacy definition-matching hint; never a substitute for harness_profile_ref
    approach_hint: Hint | None = None
    execution_refs: ExecutionRefs = Field(default_factory=dict)
    # static repository authority: admitted by ops_contracts, copied to the queue unchanged
    repository_grant: RepositoryGrantV1 | None = None


class Rule(BaseModel):
    model_config = _CONFIG

    id: Slug
    action: ActionFields


class Instruction(ActionFields):
    id: Slug
    report_only: StrictBool = False

    def action_fields(self) -> ActionFields:
        # the already-admitted values are passed through, not re-parsed
        return ActionFields.model_validate(
            {name: getattr(self, name) for name in ActionFields.model_fields}
        )


@dataclass(frozen=True, slots=True)
class TaskSource:
    """One rule or instruction of a definition, as emission sees it."""

    source_type: SourceType
    source_id: str
    action: ActionFields
    report_only: bool
    # where its action fields sit in the file, for error paths: rules[0].action, instructions[1]
    field_path: str


class ActivityDefinitionSpec(BaseModel):
    """One validated definition file."""

    model_config = _CONFIG

    id: Slug
    title: Title
    schedule: Schedule | None = None
    paused: StrictBool = False
    rules: tuple[Rule, ...] = ()
    instructions: tuple[Instruction, ...] = ()

    @property
    def uuid(self) -> uuid.UUID:
        return definition_uuid(self.id)

    def task_sources(self) -> list[TaskSource]:
        """Rules then instructions, in file order."""
        sources = [
            TaskSource(SourceType.rule, rule.id, rule.action, False, f"rules[{index}].action")
            for index, rule in enumerate(self.rules)
        ]
        sources.extend(
            TaskSource(
                SourceType.instruction,
                item.id,
                item.action_fields(),
                item.report_only,
                f"instructions[{index}]",
            )
            for index, item in enumerate(self.instructions)
        )
        return sources

    def stored(self) -> dict[str, Any]:
        """The JSON form kept in activity_definitions.definition (grants as admitted)."""
        return self.model_dump(mode="json")

    def content_digest(self) -> str:
        """Digest of the stored form; sync updates a row only when this changes."""
        return digest_hex(self.stored(), domain="activity-core/activity-definition/v1")
