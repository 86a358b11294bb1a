"""Definition files at sync: every rule, good and bad, with the field path it reports."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ac_definitions import GRANT as GOOD_GRANT
from activity_core.definitions.model import DEFINITION_NAMESPACE, definition_uuid
from activity_core.definitions.validate import (
    DefinitionError,
    load_definitions,
    validate_documents,
)

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "definitions"

RULE = "rules[0].action"
GRANT = f"{RULE}.repository_grant"


def definition(**top: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "fi-daily-brief",
        "title": "FI daily brief",
        "schedule": {"cron": "0 6 * * 1-5", "timezone": "Europe/Berlin"},
        "rules": [
            {
                "id": "daily-brief",
                "action": {
                    "task_template": "Research brief for {scheduled_for:%Y-%m-%d}",
                    "target_repo": "research/briefs",
                    "labels": ["automated", "research-brief"],
                    "priority": "medium",
                    "harness_profile_ref": "harness.agent-dev@1.0.0",
                    "execution_refs": {"correlation_id": "context.request.correlation_id"},
                    "repository_grant": copy.deepcopy(GOOD_GRANT),
                },
            }
        ],
    }
    base.update(top)
    return base


def with_action(**fields: Any) -> dict[str, Any]:
    doc = definition()
    action = doc["rules"][0]["action"]
    for key, value in fields.items():
        if value is _DROP:
            action.pop(key, None)
        else:
            action[key] = value
    return doc


_DROP = object()


def errors_of(doc: dict[str, Any] | str, *, require_profile: bool = False) -> list[tuple[str, str]]:
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False)
    result = validate_documents([("def.yaml", text)], require_profile=require_profile)
    if result.ok:
        assert len(result.specs) == 1
    return [(e.field_path, e.message) for e in result.errors]


def paths_of(doc: dict[str, Any] | str, *, require_profile: bool = False) -> list[str]:
    return [path for path, _ in errors_of(doc, require_profile=require_profile)]


def test_the_reference_definition_is_valid() -> None:
    assert errors_of(definition()) == []


# --- repository grant v1: every rule ----------------------------------------------------------

GOOD_GRANTS = [
    pytest.param(GOOD_GRANT, id="minimal"),
    pytest.param({**GOOD_GRANT, "allowed_paths": ["docs/", "README.md"]}, id="dir-and-file"),
    pytest.param({**GOOD_GRANT, "allowed_paths": ["docs/**"]}, id="recursive-segment"),
    pytest.param({**GOOD_GRANT, "allowed_paths": ["**/*.md"]}, id="leading-double-star"),
    pytest.param({**GOOD_GRANT, "allowed_paths": ["src/*.py", "a?c.txt"]}, id="wildcards"),
    pytest.param(
        {**GOOD_GRANT, "allowed_paths": [".gitignore", ".gitmodules"]}, id="dot-git-names"
    ),
    pytest.param({**GOOD_GRANT, "commit_count": {"min": 1, "max": 32}}, id="commit-bounds-max"),
    pytest.param({**GOOD_GRANT, "commit_count": {"min": 32, "max": 32}}, id="commit-min-eq-max"),
    pytest.param(
        {**GOOD_GRANT, "allowed_paths": [f"p{i}/" for i in range(100)]}, id="hundred-paths"
    ),
]


@pytest.mark.parametrize("grant", GOOD_GRANTS)
def test_good_grants_are_admitted_unchanged(grant: dict[str, Any]) -> None:
    result = validate_documents(
        [("def.yaml", yaml.safe_dump(with_action(repository_grant=grant)))],
        require_profile=False,
    )
    assert result.errors == []
    admitted = result.specs[0].rules[0].action.repository_grant
    assert admitted is not None
    assert admitted.as_admitted() == grant


def _bad(field: str, value: object, sub_path: str, message: str, case: str) -> Any:
    """A BAD_GRANTS case: the good grant with one field's value replaced."""
    return pytest.param({**GOOD_GRANT, field: value}, sub_path, message, id=case)


BAD_GRANTS = [
    pytest.param({**GOOD_GRANT, "version": 1}, "version", "bare number", id="version-int"),
    pytest.param({**GOOD_GRANT, "version": 1.0}, "version", "bare number", id="version-float"),
    pytest.param({**GOOD_GRANT, "version": "2"}, "version", "unsupported", id="version-2"),
    pytest.param({**GOOD_GRANT, "version": True}, "version", "unsupported", id="version-bool"),
    pytest.param(
        {k: v for k, v in GOOD_GRANT.items() if k != "version"},
        "version",
        "missing",
        id="version-missing",
    ),
    pytest.param({**GOOD_GRANT, "extra": 1}, "extra", "unknown field", id="unknown-field"),
    _bad("allowed_paths", "briefs/", "allowed_paths", "list", "paths-string"),
    _bad("allowed_paths", [], "allowed_paths", "at least", "paths-empty"),
    _bad(
        "allowed_paths", [f"p{i}/" for i in range(101)], "allowed_paths", "at most 100", "paths-101"
    ),
    _bad(
        "allowed_paths",
        ["a/", "b/", "a/"],
        "allowed_paths[2]",
        "duplicate of allowed_paths[0]",
        "paths-duplicate",
    ),
    _bad("allowed_paths", ["/etc/"], "allowed_paths[0]", "relative", "absolute"),
    _bad("allowed_paths", ["~/x"], "allowed_paths[0]", "'~'", "home"),
    _bad("allowed_paths", ["docs\\x"], "allowed_paths[0]", "separator", "backslash"),
    _bad("allowed_paths", ["C:x/"], "allowed_paths[0]", "drive", "drive-prefix"),
    _bad("allowed_paths", ["a//b"], "allowed_paths[0]", "empty segment", "a//b"),
    _bad("allowed_paths", ["./docs/"], "allowed_paths[0]", "'..'", "dot-segment"),
    _bad("allowed_paths", ["docs/../../etc"], "allowed_paths[0]", "'..'", "traversal"),
    _bad("allowed_paths", [".git/hooks/"], "allowed_paths[0]", ".git", "dot-git"),
    _bad("allowed_paths", ["sub/.GIT/config"], "allowed_paths[0]", ".git", "dot-git-any-case"),
    _bad(
        "allowed_paths",
        ["docs/**.md"],
        "allowed_paths[0]",
        "whole path segment",
        "partial-double-star",
    ),
    _bad("allowed_paths", [""], "allowed_paths[0]", "empty", "empty-path"),
    _bad("allowed_paths", ["a\x01b"], "allowed_paths[0]", "control", "control"),
    _bad("allowed_paths", ["a" * 257], "allowed_paths[0]", "256", "too-long"),
    _bad("allowed_paths", [5], "allowed_paths[0]", "string", "path-int"),
    _bad("commit_count", {"max": 1}, "commit_count.min", "missing", "commit-min-missing"),
    _bad(
        "commit_count", {"min": 0, "max": 1}, "commit_count.min", "between 1 and 32", "commit-min-0"
    ),
    _bad(
        "commit_count",
        {"min": 1, "max": 33},
        "commit_count.max",
        "between 1 and 32",
        "commit-max-33",
    ),
    _bad(
        "commit_count", {"min": 3, "max": 2}, "commit_count", "must not exceed", "commit-min-gt-max"
    ),
    _bad("commit_count", {"min": True, "max": 1}, "commit_count.min", "integer", "commit-bool"),
    _bad("commit_count", {"min": "1", "max": 1}, "commit_count.min", "integer", "commit-string"),
    _bad("commit_count", {"min": 1.0, "max": 1}, "commit_count.min", "integer", "commit-float"),
    _bad(
        "commit_count",
        {"min": 1, "max": 1, "step": 1},
        "commit_count.step",
        "unknown field",
        "commit-unknown",
    ),
    _bad("commit_count", 1, "commit_count", "object", "commit-scalar"),
    pytest.param({**GOOD_GRANT, "publish": True}, "publish", "not permitted", id="publish-true"),
    pytest.param({**GOOD_GRANT, "publish": "false"}, "publish", "boolean", id="publish-string"),
    pytest.param(
        {k: v for k, v in GOOD_GRANT.items() if k != "publish"},
        "publish",
        "missing",
        id="publish-missing",
    ),
]


@pytest.mark.parametrize(("grant", "sub_path", "message"), BAD_GRANTS)
def test_bad_grants_are_refused_at_their_field_path(
    grant: dict[str, Any], sub_path: str, message: str
) -> None:
    found = errors_of(with_action(repository_grant=grant))
    assert any(path == f"{GRANT}.{sub_path}" and message in text for path, text in found), found


def test_a_grant_that_is_not_a_mapping_is_refused_at_the_grant() -> None:
    assert errors_of(with_action(repository_grant=["briefs/"])) == [
        (GRANT, "grant must be an object")
    ]


def test_yaml_version_1_fails_but_quoted_passes() -> None:
    bare = yaml.safe_dump(definition()).replace("version: '1'", "version: 1")
    assert "version: 1\n" in bare
    assert paths_of(bare) == [f"{GRANT}.version"]
    quoted = bare.replace("version: 1\n", 'version: "1"\n')
    assert errors_of(quoted) == []


def test_every_grant_problem_is_reported_at_once() -> None:
    grant = {
        "version": 1,
        "allowed_paths": ["/abs", "ok/", "../up"],
        "commit_count": {"min": 0, "max": 40},
        "publish": True,
        "extra": 1,
    }
    assert sorted(paths_of(with_action(repository_grant=grant))) == sorted(
        f"{GRANT}.{p}"
        for p in (
            "extra",
            "version",
            "allowed_paths[0]",
            "allowed_paths[2]",
            "commit_count.min",
            "commit_count.max",
            "publish",
        )
    )


# --- harness profile refs ---------------------------------------------------------------------

GOOD_REFS = [
    "harness.agent-dev@1.0.0",
    "harness.agent-dev-local@1.0.0",
    "a@0.0.1",
    "x_y@10.20.30",
    "x@1.2.3-rc.1",
    "x@1.2.3+build.5",
]

BAD_REFS = [
    pytest.param("harness.agent-dev", "exactly one '@'", id="unpinned-no-at"),
    pytest.param("x@1", "pinned", id="partial-major"),
    pytest.param("x@1.0", "pinned", id="partial-minor"),
    pytest.param("x@1.x", "pinned", id="x-range"),
    pytest.param("x@^1.0.0", "pinned", id="caret-range"),
    pytest.param("x@1.0.*", "pinned", id="wildcard"),
    pytest.param("x@latest", "pinned", id="tag"),
    pytest.param("x@", "pinned", id="empty-version"),
    pytest.param("@1.0.0", "profile id", id="empty-id"),
    pytest.param("Harness@1.0.0", "profile id", id="uppercase-id"),
    pytest.param("a@b@1.0.0", "exactly one '@'", id="two-ats"),
    pytest.param(" x@1.0.0", "whitespace", id="leading-space"),
    pytest.param("x@1.0.0 ", "whitespace", id="trailing-space"),
    pytest.param("x @1.0.0", "whitespace", id="inner-space"),
    pytest.param("x@1.0.0\n", "whitespace", id="newline"),
    pytest.param("", "empty", id="empty"),
    pytest.param("x" * 129 + "@1.0.0", "1-128 characters", id="id-too-long"),
    pytest.param("x@1.0.0-" + "a" * 260, "longer than", id="too-long"),
    pytest.param(5, "string", id="number"),
    pytest.param(True, "string", id="boolean"),
]


@pytest.mark.parametrize("ref", GOOD_REFS)
@pytest.mark.parametrize("require", [False, True])
def test_good_profile_refs(ref: str, require: bool) -> None:
    assert errors_of(with_action(harness_profile_ref=ref), require_profile=require) == []


@pytest.mark.parametrize(("ref", "message"), BAD_REFS)
@pytest.mark.parametrize("require", [False, True])
def test_bad_profile_refs_are_refused_whatever_the_flag(
    ref: object, message: str, require: bool
) -> None:
    found = errors_of(with_action(harness_profile_ref=ref), require_profile=require)
    assert [p for p, _ in found] == [f"{RULE}.harness_profile_ref"], found
    assert message in found[0][1]


@pytest.mark.parametrize("value", [_DROP, None])
def test_a_missing_profile_ref_is_fine_with_the_flag_off(value: object) -> None:
    assert errors_of(with_action(harness_profile_ref=value), require_profile=False) == []


@pytest.mark.parametrize("value", [_DROP, None])
def test_a_missing_profile_ref_is_an_error_with_the_flag_on(value: object) -> None:
    found = errors_of(with_action(harness_profile_ref=value), require_profile=True)
    assert found == [
        (
            f"{RULE}.harness_profile_ref",
            "required when ACTIVITY_CORE_REQUIRE_HARNESS_PROFILE=true",
        )
    ]


def test_approach_hint_never_substitutes_for_a_missing_ref() -> None:
    doc = with_action(harness_profile_ref=_DROP, approach_hint="legacy-definition-match")
    assert errors_of(doc, require_profile=False) == []
    [(path, message)] = errors_of(doc, require_profile=True)
    assert path == f"{RULE}.harness_profile_ref"
    assert "approach_hint does not substitute" in message


def test_approach_hint_never_excuses_a_malformed_ref() -> None:
    doc = with_action(harness_profile_ref="harness.agent-dev", approach_hint="legacy")
    assert paths_of(doc, require_profile=False) == [f"{RULE}.harness_profile_ref"]


def report_only_instruction(**fields: Any) -> dict[str, Any]:
    doc = definition()
    doc["instructions"] = [
        {"id": "weekly-digest", "report_only": True, "task_template": "Digest", **fields}
    ]
    return doc


def test_report_only_instructions_are_exempt_from_the_required_profile() -> None:
    assert errors_of(report_only_instruction(), require_profile=True) == []


def test_report_only_instructions_still_have_declared_refs_checked() -> None:
    doc = report_only_instruction(harness_profile_ref="x@1")
    assert paths_of(doc, require_profile=True) == ["instructions[0].harness_profile_ref"]


def test_emitting_instructions_need_a_profile_when_required() -> None:
    doc = definition()
    doc["instructions"] = [
        {"id": "emit", "task_template": "Do it", "target_repo": "a/b"},
        {"id": "emit-too", "report_only": False, "task_template": "Do", "target_repo": "a/b"},
    ]
    assert paths_of(doc, require_profile=True) == [
        "instructions[0].harness_profile_ref",
        "instructions[1].harness_profile_ref",
    ]
    assert paths_of(doc, require_profile=False) == []


def test_emitting_items_need_a_task_template_and_target_repo() -> None:
    doc = with_action(task_template=_DROP, target_repo=_DROP)
    assert paths_of(doc) == [f"{RULE}.task_template", f"{RULE}.target_repo"]


# --- execution_refs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "refs",
    [
        {"correlation_id": "context.request.correlation_id"},
        {"causation_id": "context.schedule.scheduled_for"},
        {"request_ref": "context.request.request_ref"},
        {"goal_refs": ["context.request.goal_ref"]},
        {"goal_refs": "context.request.goal_refs"},
        {"initiative_refs": ["context.request.a", "context.request.b"]},
        {},
    ],
)
def test_allowlisted_execution_refs(refs: dict[str, Any]) -> None:
    assert errors_of(with_action(execution_refs=refs)) == []


@pytest.mark.parametrize(
    ("refs", "sub_path", "message"),
    [
        ({"secret": "context.request.token"}, "secret", "unknown attribution key"),
        ({"repository_grant": "context.request.x"}, "repository_grant", "unknown attribution"),
        ({"Correlation_Id": "context.request.x"}, "Correlation_Id", "unknown attribution"),
        ({"correlation_id": ["context.request.x"]}, "correlation_id", "takes one path"),
        ({"correlation_id": 5}, "correlation_id", "dotted path string"),
        ({"correlation_id": "request.x"}, "correlation_id", "unknown root"),
        ({"correlation_id": "context.x"}, "correlation_id", "context.request.<name>"),
        ({"correlation_id": "context.request.a[0]"}, "correlation_id", "index access"),
        ({"goal_refs": []}, "goal_refs", "at least one"),
        ({"goal_refs": ["context.request.g", 7]}, "goal_refs[1]", "dotted path string"),
    ],
)
def test_bad_execution_refs(refs: dict[str, Any], sub_path: str, message: str) -> None:
    found = errors_of(with_action(execution_refs=refs))
    assert [p for p, _ in found] == [f"{RULE}.execution_refs.{sub_path}"], found
    assert message in found[0][1]


def test_execution_refs_must_be_a_mapping() -> None:
    assert paths_of(with_action(execution_refs=["context.request.x"])) == [f"{RULE}.execution_refs"]


# --- YAML scalar typing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("task_template", 5),
        ("task_template", True),
        ("target_repo", 12),
        ("approach_hint", 1.5),
        ("priority", 1),
        ("labels", "automated"),
        ("description_template", ["a"]),
    ],
)
def test_non_string_scalars_are_not_coerced(field: str, value: object) -> None:
    assert paths_of(with_action(**{field: value})) == [f"{RULE}.{field}"]


def test_non_string_labels_are_refused_by_index() -> None:
    assert paths_of(with_action(labels=["ok", 3, False])) == [
        f"{RULE}.labels[1]",
        f"{RULE}.labels[2]",
    ]


@pytest.mark.parametrize(
    ("yaml_text", "path"),
    [
        ("id: 123\ntitle: t\n", "id"),
        ("id: x\ntitle: 2024-01-01\n", "title"),
        ("id: x\ntitle: t\npaused: 'yes'\n", "paused"),
        ("id: x\ntitle: t\nschedule: {cron: 5, timezone: UTC}\n", "schedule.cron"),
        (
            "id: x\ntitle: t\ninstructions: [{id: i, report_only: 1, task_template: t}]\n",
            "instructions[0].report_only",
        ),
    ],
)
def test_yaml_scalar_typing_at_every_level(yaml_text: str, path: str) -> None:
    assert path in paths_of(yaml_text)


# --- slugs, unknown keys, duplicates ----------------------------------------------------------


@pytest.mark.parametrize("slug", ["Bad", "-x", ".x", "a b", "a:b", "", "x" * 129, "ä"])
def test_bad_definition_slugs(slug: str) -> None:
    assert paths_of(definition(id=slug)) == ["id"]


def test_bad_rule_ids_are_refused() -> None:
    doc = definition()
    doc["rules"][0]["id"] = "has:colon"
    assert paths_of(doc) == ["rules[0].id"]


def test_unknown_keys_at_every_level() -> None:
    doc = definition(owner="me")
    doc["schedule"]["jitter"] = 5
    doc["rules"][0]["when"] = "always"
    doc["rules"][0]["action"]["target"] = "x"
    assert sorted(paths_of(doc)) == sorted(
        ["owner", "schedule.jitter", "rules[0].when", f"{RULE}.target"]
    )


def test_duplicate_rule_and_instruction_ids_share_one_namespace() -> None:
    doc = definition()
    doc["rules"].append(copy.deepcopy(doc["rules"][0]))
    doc["instructions"] = [{"id": "daily-brief", "report_only": True}]
    assert paths_of(doc) == ["rules[1].id", "instructions[0].id"]


def test_duplicate_yaml_keys_are_an_error() -> None:
    found = errors_of("id: a\ntitle: t\ntitle: u\n")
    assert found[0][0] == "$"
    assert "duplicate key 'title'" in found[0][1]


def test_duplicate_definition_ids_across_files() -> None:
    text = yaml.safe_dump(definition())
    result = validate_documents([("a.yaml", text), ("b.yaml", text)], require_profile=False)
    assert result.errors == [
        DefinitionError(
            "b.yaml", "fi-daily-brief", "id", "duplicate definition id; already defined in a.yaml"
        )
    ]


def test_yaml_syntax_errors_name_the_line() -> None:
    [(path, message)] = errors_of("id: x\ntitle: [unclosed\n")
    assert path == "$"
    assert message.startswith("YAML error at line 3")


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "file is empty"), ("- a\n- b\n", "must be a mapping"), ("---\nid: a\n---\nid: b\n", "")],
)
def test_files_that_are_not_one_mapping(text: str, message: str) -> None:
    [(path, found)] = errors_of(text)
    assert path == "$"
    assert message in found


# --- cron, time zones, templates --------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("0 6 * *", "5 fields"),
        ("0 6 * * 1-5 2026", "5 fields"),
        ("60 6 * * *", "minute field '60': 60 is out of range 0-59"),
        ("0 24 * * *", "hour"),
        ("0 6 0 * *", "day-of-month"),
        ("0 6 * 13 *", "month"),
        ("0 6 * * 8", "day-of-week"),
        ("0 6 * * 5-1", "after its end"),
        ("*/0 * * * *", "positive integer"),
        ("5/15 * * * *", "needs '*' or a range"),
        ("0 6 * * funday", "name"),
        ("@daily", "5 fields"),
        ("0 6 ? * *", "not a number"),
    ],
)
def test_bad_cron_is_refused_at_schedule_cron(cron: str, message: str) -> None:
    doc = definition(schedule={"cron": cron, "timezone": "UTC"})
    [(path, found)] = errors_of(doc)
    assert path == "schedule.cron"
    assert message in found


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "europe/berlin", "/etc/passwd", "../x", "", "+01:00"]
)
def test_bad_timezones_are_refused(zone: str) -> None:
    doc = definition(schedule={"cron": "0 6 * * 1-5", "timezone": zone})
    assert paths_of(doc) == ["schedule.timezone"]


def test_a_schedule_needs_both_fields() -> None:
    assert paths_of(definition(schedule={"cron": "0 6 * * *"})) == ["schedule.timezone"]


def test_no_schedule_means_manual_only() -> None:
    doc = definition()
    del doc["schedule"]
    assert errors_of(doc) == []


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("Brief for {when}", "unknown root 'when'"),
        ("Brief {}", "positional"),
        ("Brief {0}", "positional"),
        ("Brief {scheduled_for.year}", "has no fields"),
        ("Brief {context}", "context.request.<name>"),
        ("Brief {context.other.x}", "context.request.<name>"),
        ("Brief {context.request.items[0]}", "index access"),
        ("Brief {scheduled_for:{width}}", "must not contain fields"),
        ("Brief {activity_id!x}", "conversion"),
        ("Brief {activity_id:d}", "format spec"),
        ("Brief {scheduled_for", "does not parse"),
        ("Brief }", "does not parse"),
    ],
)
def test_bad_templates_are_refused_at_their_field(template: str, message: str) -> None:
    [(path, found)] = errors_of(with_action(task_template=template))
    assert path == f"{RULE}.task_template"
    assert message in found


@pytest.mark.parametrize(
    "template",
    [
        "Research brief for {scheduled_for:%Y-%m-%d}",
        "{fired_at:%H:%M} {activity_id} {context.request.title!r} {context.schedule.x:>10}",
        "Literal {{braces}} only",
        "",
    ],
)
def test_good_templates(template: str) -> None:
    assert errors_of(with_action(description_template=template)) == []


# --- whole files and directories --------------------------------------------------------------


def test_every_error_of_a_file_is_collected_with_file_and_id() -> None:
    doc = with_action(harness_profile_ref="x@1", priority="urgent", labels=[1])
    doc["schedule"] = {"cron": "61 * * * *", "timezone": "Nowhere/City"}
    result = validate_documents([("defs/a.yaml", yaml.safe_dump(doc))], require_profile=False)
    lines = [str(e) for e in result.errors]
    assert len(lines) == 5
    assert all(line.startswith("defs/a.yaml: fi-daily-brief: ") for line in lines)
    assert result.specs == []


def test_the_shipped_examples_pass_with_the_flag_on_and_off() -> None:
    for flag in (False, True):
        result = load_definitions([EXAMPLES], require_profile=flag)
        assert result.errors == []
        assert {spec.id for spec in result.specs} >= {
            "fi-daily-brief",
            "docs-maintenance",
            "weekly-digest",
        }
        daily = next(s for s in result.specs if s.id == "fi-daily-brief")
        assert daily.schedule is not None
        assert (daily.schedule.cron, daily.schedule.timezone) == ("0 6 * * 1-5", "Europe/Berlin")


def test_missing_paths_and_empty_directories_are_errors(tmp_path: Path) -> None:
    result = load_definitions([tmp_path / "nope.yaml", tmp_path], require_profile=False)
    assert [e.message for e in result.errors] == [
        "no such file or directory",
        "directory has no *.yaml files",
    ]


def test_directories_take_yaml_and_yml_files_once(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(definition(id="a")))
    (tmp_path / "b.yml").write_text(yaml.safe_dump(definition(id="b")))
    (tmp_path / "notes.txt").write_text("not a definition")
    result = load_definitions([tmp_path, tmp_path / "a.yaml"], require_profile=False)
    assert result.errors == []
    assert [s.id for s in result.specs] == ["a", "b"]


def test_definition_uuid_is_uuid5_of_the_documented_namespace() -> None:
    import uuid

    assert (
        uuid.uuid5(uuid.NAMESPACE_URL, "urn:ops-queue:activity-core:activity-definition")
        == DEFINITION_NAMESPACE
    )
    assert definition_uuid("fi-daily-brief") == uuid.uuid5(DEFINITION_NAMESPACE, "fi-daily-brief")
    assert definition_uuid("fi-daily-brief") != definition_uuid("fi-daily-brief-2")
