"""Load and validate definition files, collecting every error (pure but for reading files).

Each error carries the file, the definition id (``-`` when the file has none), a field path
(``rules[0].action.repository_grant.allowed_paths[2]``; ``$`` is the file itself) and a
message. Nothing stops at the first problem: YAML errors, types, unknown keys, slugs,
cron, time zones, templates, profile refs, attribution keys, every grant rule, duplicate
ids in a file and across files are all reported in one run, so an author fixes a
directory in one round trip.

A missing ``harness_profile_ref`` is an error when ``require_profile`` is true
(``ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE``), except on report-only instructions, which
create no execution request. ``approach_hint`` never stands in for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from activity_core.definitions.model import ActivityDefinitionSpec, NestedFieldError
from ops_contracts import GrantValidationError

__all__ = [
    "DEFINITION_SUFFIXES",
    "DefinitionError",
    "LoadedDefinition",
    "ValidationResult",
    "collect_definition_files",
    "load_definitions",
    "validate_documents",
]

DEFINITION_SUFFIXES: tuple[str, ...] = (".yaml", ".yml")
NO_ID = "-"
ROOT = "$"

_MESSAGES: Mapping[str, str] = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
    "string_type": "must be a string (quote it in YAML)",
    "bool_type": "must be true or false",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
}


@dataclass(frozen=True, order=True, slots=True)
class DefinitionError:
    file: str
    definition_id: str
    field_path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.definition_id}: {self.field_path}: {self.message}"


@dataclass(frozen=True, slots=True)
class LoadedDefinition:
    file: str
    spec: ActivityDefinitionSpec


@dataclass(frozen=True, slots=True)
class ValidationResult:
    definitions: list[LoadedDefinition] = field(default_factory=list)
    errors: list[DefinitionError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def specs(self) -> list[ActivityDefinitionSpec]:
        return [loaded.spec for loaded in self.definitions]


def collect_definition_files(paths: Iterable[Path]) -> tuple[list[Path], list[DefinitionError]]:
    """Files named directly, plus the ``*.yaml`` / ``*.yml`` files directly in directories.

    Directories are not searched recursively; each file is read once however often it
    is named.
    """
    files: list[Path] = []
    errors: list[DefinitionError] = []
    seen: set[Path] = set()
    for path in paths:
        if path.is_dir():
            found = sorted(
                p for p in path.iterdir() if p.is_file() and p.suffix in DEFINITION_SUFFIXES
            )
            if not found:
                errors.append(
                    DefinitionError(str(path), NO_ID, ROOT, "directory has no *.yaml files")
                )
        elif path.is_file():
            found = [path]
        else:
            errors.append(DefinitionError(str(path), NO_ID, ROOT, "no such file or directory"))
            continue
        for file in found:
            key = file.resolve()
            if key not in seen:
                seen.add(key)
                files.append(file)
    return files, errors


def load_definitions(paths: Iterable[Path], *, require_profile: bool) -> ValidationResult:
    """Read and validate every definition file under ``paths``."""
    files, errors = collect_definition_files(paths)
    documents: list[tuple[str, str]] = []
    for file in files:
        try:
            documents.append((str(file), file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(DefinitionError(str(file), NO_ID, ROOT, f"cannot read: {exc}"))
    result = validate_documents(documents, require_profile=require_profile)
    return ValidationResult(result.definitions, errors + result.errors)


def validate_documents(
    documents: Sequence[tuple[str, str]], *, require_profile: bool
) -> ValidationResult:
    """Validate ``(file name, YAML text)`` pairs as one set of definitions."""
    definitions: list[LoadedDefinition] = []
    errors: list[DefinitionError] = []
    first_file_of: dict[str, str] = {}
    for name, text in documents:
        file_errors: list[DefinitionError] = []
        claimed_id, spec = _validate_one(
            name, text, require_profile=require_profile, errors=file_errors
        )
        errors.extend(file_errors)
        if claimed_id is not None:
            # a broken file still claims its id, so a second file with it is reported too
            if claimed_id in first_file_of:
                errors.append(
                    DefinitionError(
                        name,
                        claimed_id,
                        "id",
                        f"duplicate definition id; already defined in {first_file_of[claimed_id]}",
                    )
                )
                continue
            first_file_of[claimed_id] = name
        if spec is not None:
            definitions.append(LoadedDefinition(name, spec))
    return ValidationResult(definitions, errors)


def _validate_one(
    name: str, text: str, *, require_profile: bool, errors: list[DefinitionError]
) -> tuple[str | None, ActivityDefinitionSpec | None]:
    """The id the file claims (if any) and its spec (only when it has no problem at all)."""
    try:
        raw = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        errors.append(DefinitionError(name, NO_ID, ROOT, _yaml_message(exc)))
        return None, None
    if raw is None:
        errors.append(DefinitionError(name, NO_ID, ROOT, "file is empty"))
        return None, None
    if not isinstance(raw, Mapping):
        errors.append(DefinitionError(name, NO_ID, ROOT, "a definition file must be a mapping"))
        return None, None
    claimed_id = raw["id"] if isinstance(raw.get("id"), str) else None
    problems: list[tuple[str, str]] = []
    spec: ActivityDefinitionSpec | None = None
    try:
        spec = ActivityDefinitionSpec.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_pydantic_problems(exc))
    # Cross-field rules run on the raw mapping so they are reported even when a field
    # elsewhere in the file has a type error.
    problems.extend(_cross_field_problems(raw, require_profile=require_profile))
    errors.extend(
        DefinitionError(name, claimed_id or NO_ID, path, message) for path, message in problems
    )
    return claimed_id, None if problems else spec


# --- YAML -----------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key; the constructor below reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _yaml_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"YAML error at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return f"YAML error: {problem}"


# --- pydantic errors -> field paths ------------------------------------------------------


def _join(base: str, sub: str) -> str:
    if not sub:
        return base
    if sub.startswith("["):
        return base + sub
    sub = sub.removeprefix(".")
    return f"{base}.{sub}" if base else sub


def _location(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        path = _join(path, f"[{part}]" if isinstance(part, int) else str(part))
    return path or ROOT


def _pydantic_problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for error in exc.errors():
        base = _location(error["loc"])
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, GrantValidationError):
            problems.extend(
                (base if e.path == ROOT else _join(base, e.path), e.message) for e in cause.errors
            )
        elif isinstance(cause, NestedFieldError):
            problems.extend((_join(base, p.path), p.message) for p in cause.problems)
        elif isinstance(cause, ValueError):
            problems.append((base, str(cause)))
        else:
            problems.append((base, _MESSAGES.get(error["type"], error["msg"])))
    return problems


# --- cross-field rules ---------------------------------------------------------------------


def _items(raw: Mapping[Any, Any], key: str) -> list[tuple[int, Mapping[Any, Any]]]:
    value = raw.get(key)
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, Mapping)]


def _cross_field_problems(
    raw: Mapping[Any, Any], *, require_profile: bool
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    # rule and instruction ids share one namespace: both become source_id in the
    # idempotency key {activity_id}:{source_id}:{triggering_event_id}
    first_seen: dict[str, str] = {}
    items: list[tuple[str, Mapping[Any, Any] | None, bool]] = []
    for kind, index, item in [("rules", i, it) for i, it in _items(raw, "rules")] + [
        ("instructions", i, it) for i, it in _items(raw, "instructions")
    ]:
        where = f"{kind}[{index}]"
        ident = item.get("id")
        if isinstance(ident, str):
            if ident in first_seen:
                problems.append((f"{where}.id", f"duplicate of {first_seen[ident]}.id"))
            else:
                first_seen[ident] = where
        if kind == "rules":
            action = item.get("action")
            items.append((f"{where}.action", action if isinstance(action, Mapping) else None, True))
        else:
            items.append((where, item, item.get("report_only") is not True))
    for where, fields, emits in items:
        if fields is None or not emits:
            continue
        for required in ("task_template", "target_repo"):
            if fields.get(required) is None:
                problems.append(
                    (f"{where}.{required}", "required for a rule or instruction that emits tasks")
                )
        if require_profile and fields.get("harness_profile_ref") is None:
            message = "required when ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE=true"
            if fields.get("approach_hint") is not None:
                message += "; approach_hint does not substitute for it"
            problems.append((f"{where}.harness_profile_ref", message))
    return problems
