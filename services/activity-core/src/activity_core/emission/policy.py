"""The emission policy, checked over the whole batch before anything is written (pure).

The same rules as definition sync, repeated because the spec reaching emission may have
been stored by an older build or built some other way:

- every declared ``harness_profile_ref`` is pinned ``<id>@<version>`` with no whitespace;
- with ``require_profile`` (``ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE=true``) every item that
  emits a task has one; report-only instructions are exempt; ``approach_hint`` never
  substitutes for a missing or malformed ref;
- every repository grant is re-admitted by ``ops_contracts.parse_repository_grant``;
- ``execution_refs`` keys are attribution keys only;
- an item that emits a task has a task template and a target repo;
- the fire's triggering event id is per-fire: never empty, never the bare ``scheduled``.

Any problem refuses the whole batch with every problem listed.
"""

from __future__ import annotations

from activity_core.definitions.model import ActivityDefinitionSpec, TaskSource
from activity_core.definitions.templates import TemplateError, parse_path, parse_template
from activity_core.emission.errors import EmissionPolicyError, PolicyProblem
from activity_core.emission.fire import FireContext
from activity_core.emission.trigger import SCHEDULED_TRIGGER_KEY
from ops_contracts import (
    ATTRIBUTION_REF_KEYS,
    GrantValidationError,
    harness_profile_ref_error,
    parse_repository_grant,
)

__all__ = ["batch_problems", "check_batch"]


def check_batch(
    spec: ActivityDefinitionSpec, *, fire: FireContext, require_profile: bool
) -> list[TaskSource]:
    """The batch's task sources, or EmissionPolicyError listing every problem."""
    sources = spec.task_sources()
    problems = batch_problems(spec, sources, fire=fire, require_profile=require_profile)
    if problems:
        raise EmissionPolicyError(spec.id, problems)
    return sources


def batch_problems(
    spec: ActivityDefinitionSpec,
    sources: list[TaskSource],
    *,
    fire: FireContext,
    require_profile: bool,
) -> list[PolicyProblem]:
    problems: list[PolicyProblem] = []
    if not fire.triggering_event_id or fire.triggering_event_id == SCHEDULED_TRIGGER_KEY:
        problems.append(
            PolicyProblem(
                "triggering_event_id",
                f"{fire.triggering_event_id!r} is not a per-fire event id",
            )
        )
    seen: set[str] = set()
    for source in sources:
        if source.source_id in seen:
            problems.append(PolicyProblem(f"{source.field_path}.id", "duplicate source id"))
        seen.add(source.source_id)
        problems.extend(_source_problems(source, require_profile=require_profile))
    return problems


def _source_problems(source: TaskSource, *, require_profile: bool) -> list[PolicyProblem]:
    action = source.action
    at = source.field_path
    problems: list[PolicyProblem] = []
    emits = not source.report_only
    ref = action.harness_profile_ref
    if ref is not None:
        error = harness_profile_ref_error(ref)
        if error is not None:
            problems.append(PolicyProblem(f"{at}.harness_profile_ref", error))
    elif require_profile and emits:
        message = "required when ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE=true"
        if action.approach_hint is not None:
            message += "; approach_hint does not substitute for it"
        problems.append(PolicyProblem(f"{at}.harness_profile_ref", message))
    if action.repository_grant is not None:
        try:
            parse_repository_grant(action.repository_grant.as_admitted())
        except GrantValidationError as exc:
            problems.extend(
                PolicyProblem(f"{at}.repository_grant.{e.path}", e.message) for e in exc.errors
            )
    for key, paths in action.execution_refs.items():
        if key not in ATTRIBUTION_REF_KEYS:
            problems.append(PolicyProblem(f"{at}.execution_refs.{key}", "not an attribution key"))
            continue
        for path in [paths] if isinstance(paths, str) else paths:
            try:
                parse_path(path)
            except TemplateError as exc:
                problems.append(PolicyProblem(f"{at}.execution_refs.{key}", str(exc)))
    if emits:
        if action.task_template is None:
            problems.append(PolicyProblem(f"{at}.task_template", "required to emit a task"))
        if action.target_repo is None:
            problems.append(PolicyProblem(f"{at}.target_repo", "required to emit a task"))
    for name in ("task_template", "description_template"):
        template = getattr(action, name)
        if template is not None:
            try:
                parse_template(template)
            except TemplateError as exc:
                problems.append(PolicyProblem(f"{at}.{name}", str(exc)))
    return problems
