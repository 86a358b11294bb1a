"""Repository grant v1 admission: every rule, every error path, all errors at once."""

import copy
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from ops_contracts import (
    CommitCount,
    GrantFieldError,
    GrantValidationError,
    RepositoryGrantV1,
    parse_repository_grant,
)


def grant(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "version": "1",
        "allowed_paths": ["docs/", "README.md"],
        "commit_count": {"min": 1, "max": 1},
        "publish": False,
    }
    raw.update(overrides)
    return raw


def without(key: str) -> dict[str, Any]:
    raw = grant()
    del raw[key]
    return raw


def commit_count(**fields: Any) -> dict[str, Any]:
    return grant(commit_count=fields)


GOOD_PATTERNS = [
    "README.md",
    "docs/",
    "docs/api/",
    "src/**/*.py",
    "**/README.md",
    "**",
    "**/",
    "docs/**",
    "a?c.txt",
    "*.md",
    ".github/workflows/ci.yml",
    ".gitignore",
    ".gitmodules",
    ".github/",
    "dir.git/x",
    "x.git",
    "notes with spaces.md",
    "ab:c.txt",
    "docs/ümlaut.md",
    "[literal].md",
    "a-b_c.d~",
    "...",
    "..foo",
    "a" * 256,
]

GOOD_GRANTS: list[tuple[str, dict[str, Any]]] = [
    ("minimal", grant(allowed_paths=["docs/"])),
    ("spec example", grant()),
    ("every good pattern", grant(allowed_paths=GOOD_PATTERNS)),
    ("hundred patterns", grant(allowed_paths=[f"p{i}/" for i in range(100)])),
    ("commit bounds at the top", commit_count(min=32, max=32)),
    ("commit range", commit_count(min=1, max=32)),
    (
        "keys in another order",
        {
            "publish": False,
            "commit_count": {"max": 2, "min": 1},
            "allowed_paths": ["b/", "a/"],
            "version": "1",
        },
    ),
    ("tuple from python", grant(allowed_paths=("docs/",))),
]


@pytest.mark.parametrize(("name", "raw"), GOOD_GRANTS, ids=[name for name, _ in GOOD_GRANTS])
def test_good_grants_are_admitted_unchanged(name: str, raw: dict[str, Any]) -> None:
    original = copy.deepcopy(raw)
    admitted = parse_repository_grant(raw).as_admitted()
    assert admitted == {
        "version": "1",
        "allowed_paths": list(raw["allowed_paths"]),
        "commit_count": {"min": raw["commit_count"]["min"], "max": raw["commit_count"]["max"]},
        "publish": False,
    }
    assert list(admitted) == ["version", "allowed_paths", "commit_count", "publish"]
    assert parse_repository_grant(raw).model_dump(mode="json") == admitted
    assert raw == original


BAD_PATTERNS: list[tuple[str, object]] = [
    ("empty", ""),
    ("too long", "a" * 257),
    ("absolute", "/etc/passwd"),
    ("root", "/"),
    ("home", "~/x"),
    ("tilde alone", "~"),
    ("backslash", "docs\\a.md"),
    ("drive", "C:/x"),
    ("drive lowercase no slash", "c:x"),
    ("empty segment", "a//b"),
    ("double trailing slash", "a//"),
    ("leading dot segment", "./a"),
    ("inner dot segment", "a/./b"),
    ("dot alone", "."),
    ("dot directory", "./"),
    ("parent", "../a"),
    ("inner parent", "a/../b"),
    ("trailing parent", "a/.."),
    (".git", ".git"),
    (".git dir", ".git/"),
    (".git upper", ".GIT/config"),
    (".git nested", "sub/.Git/hooks/pre-commit"),
    (".git last", "sub/.git"),
    ("NUL", "a\x00b"),
    ("newline", "a\nb"),
    ("tab", "a\tb"),
    ("DEL", "a\x7f"),
    ("C1 control", "a\x85"),
    ("lone surrogate", "a\ud800"),
    ("** inside segment", "docs/**.md"),
    ("*** segment", "***"),
    ("** prefix", "a**/b"),
    ("int", 1),
    ("none", None),
    ("list", ["docs/"]),
    ("bool", True),
]


@pytest.mark.parametrize(("name", "pattern"), BAD_PATTERNS, ids=[n for n, _ in BAD_PATTERNS])
def test_each_bad_pattern_is_refused_at_its_index(name: str, pattern: object) -> None:
    with pytest.raises(GrantValidationError) as caught:
        parse_repository_grant(grant(allowed_paths=["ok/", pattern]))
    assert [e.path for e in caught.value.errors] == ["allowed_paths[1]"]
    assert caught.value.errors[0].message


NON_STRING_KEY: dict[object, object] = {key: value for key, value in grant().items()}
NON_STRING_KEY[1] = "x"

BAD_GRANTS: list[tuple[str, object, list[str]]] = [
    # the value itself
    ("string", "version: 1", ["$"]),
    ("list", [grant()], ["$"]),
    ("null", None, ["$"]),
    # exactly four fields
    ("unknown field", grant(unexpected_field=1), ["unexpected_field"]),
    ("non-string key", NON_STRING_KEY, ["1"]),
    ("missing version", without("version"), ["version"]),
    ("missing allowed_paths", without("allowed_paths"), ["allowed_paths"]),
    ("missing commit_count", without("commit_count"), ["commit_count"]),
    ("missing publish", without("publish"), ["publish"]),
    ("empty object", {}, ["version", "allowed_paths", "commit_count", "publish"]),
    # version
    ("version int", grant(version=1), ["version"]),
    ("version float", grant(version=1.0), ["version"]),
    ("version bool", grant(version=True), ["version"]),
    ("version 2", grant(version="2"), ["version"]),
    ("version 1.0", grant(version="1.0"), ["version"]),
    ("version v1", grant(version="v1"), ["version"]),
    ("version null", grant(version=None), ["version"]),
    # allowed_paths container
    ("paths string", grant(allowed_paths="docs/"), ["allowed_paths"]),
    ("paths object", grant(allowed_paths={"docs/": True}), ["allowed_paths"]),
    ("paths null", grant(allowed_paths=None), ["allowed_paths"]),
    ("paths empty", grant(allowed_paths=[]), ["allowed_paths"]),
    ("paths 101", grant(allowed_paths=[f"p{i}/" for i in range(101)]), ["allowed_paths"]),
    ("paths duplicate", grant(allowed_paths=["a/", "b", "a/"]), ["allowed_paths[2]"]),
    (
        "paths duplicates twice",
        grant(allowed_paths=["a", "a", "b", "a"]),
        ["allowed_paths[1]", "allowed_paths[3]"],
    ),
    # commit_count
    ("commit_count list", grant(commit_count=[1, 1]), ["commit_count"]),
    ("commit_count int", grant(commit_count=1), ["commit_count"]),
    ("commit_count null", grant(commit_count=None), ["commit_count"]),
    ("missing min", commit_count(max=1), ["commit_count.min"]),
    ("missing max", commit_count(min=1), ["commit_count.max"]),
    ("unknown bound", commit_count(min=1, max=1, step=1), ["commit_count.step"]),
    ("min bool", commit_count(min=True, max=1), ["commit_count.min"]),
    ("max bool", commit_count(min=1, max=True), ["commit_count.max"]),
    ("min string", commit_count(min="1", max=1), ["commit_count.min"]),
    ("max float", commit_count(min=1, max=1.0), ["commit_count.max"]),
    ("min null", commit_count(min=None, max=1), ["commit_count.min"]),
    ("min zero", commit_count(min=0, max=1), ["commit_count.min"]),
    ("min negative", commit_count(min=-1, max=1), ["commit_count.min"]),
    ("max 33", commit_count(min=1, max=33), ["commit_count.max"]),
    ("min above max", commit_count(min=3, max=2), ["commit_count"]),
    # publish
    ("publish true", grant(publish=True), ["publish"]),
    ("publish string", grant(publish="false"), ["publish"]),
    ("publish zero", grant(publish=0), ["publish"]),
    ("publish null", grant(publish=None), ["publish"]),
    # every problem at once, in a stable order
    (
        "everything wrong",
        {
            "version": 1,
            "allowed_paths": ["/abs", "ok/", "ok/", ".git/"],
            "commit_count": {"min": True, "max": 40, "extra": 0},
            "publish": True,
            "scope": "all",
        },
        [
            "scope",
            "version",
            "allowed_paths[0]",
            "allowed_paths[2]",
            "allowed_paths[3]",
            "commit_count.extra",
            "commit_count.min",
            "commit_count.max",
            "publish",
        ],
    ),
]


@pytest.mark.parametrize(
    ("name", "raw", "paths"), BAD_GRANTS, ids=[name for name, _, _ in BAD_GRANTS]
)
def test_bad_grants_name_every_bad_field(name: str, raw: object, paths: list[str]) -> None:
    with pytest.raises(GrantValidationError) as caught:
        parse_repository_grant(raw)
    assert [error.path for error in caught.value.errors] == paths
    assert all(error.message for error in caught.value.errors)
    assert isinstance(caught.value, ValueError)
    for path in paths:
        assert path in str(caught.value)


def test_bare_version_one_says_to_quote_it() -> None:
    with pytest.raises(GrantValidationError) as caught:
        parse_repository_grant(grant(version=1))
    assert caught.value.errors == [
        GrantFieldError("version", 'must be the string "1"; a bare number is ambiguous, quote it')
    ]


def test_pydantic_entry_points_apply_the_same_rules() -> None:
    bad = grant(publish=True, version=1)
    with pytest.raises(ValidationError) as caught:
        RepositoryGrantV1.model_validate(bad)
    (error,) = caught.value.errors()
    inner = error["ctx"]["error"]
    assert isinstance(inner, GrantValidationError)
    assert [e.path for e in inner.errors] == ["version", "publish"]

    with pytest.raises(ValidationError):
        RepositoryGrantV1.model_validate_json(
            '{"version": "1", "allowed_paths": ["docs/"],'
            ' "commit_count": {"min": 1, "max": true}, "publish": false}'
        )
    with pytest.raises(ValidationError):
        RepositoryGrantV1(
            version="1",
            allowed_paths=("../x",),
            commit_count=CommitCount(min=1, max=1),
            publish=False,
        )


def test_model_validate_json_admits_a_good_grant() -> None:
    admitted = RepositoryGrantV1.model_validate_json(
        '{"version": "1", "allowed_paths": ["docs/", "README.md"],'
        ' "commit_count": {"min": 1, "max": 2}, "publish": false}'
    )
    assert admitted == parse_repository_grant(grant(commit_count={"min": 1, "max": 2}))


def test_grant_as_a_field_of_another_model() -> None:
    class Action(BaseModel):
        repository_grant: RepositoryGrantV1 | None = None

    assert Action.model_validate({"repository_grant": grant()}).repository_grant is not None
    with pytest.raises(ValidationError) as caught:
        Action.model_validate({"repository_grant": grant(publish=True)})
    assert caught.value.errors()[0]["loc"] == ("repository_grant",)


def test_admitted_grant_is_immutable_and_hashable() -> None:
    admitted = parse_repository_grant(grant())
    with pytest.raises(ValidationError):
        admitted.allowed_paths = ("**",)  # type: ignore[misc]
    assert hash(admitted) == hash(parse_repository_grant(grant()))
    as_admitted = admitted.as_admitted()
    paths = as_admitted["allowed_paths"]
    assert isinstance(paths, list)
    paths.append("anything/")
    assert admitted.allowed_paths == ("docs/", "README.md")


def test_parse_returns_an_instance_unchanged_by_revalidation() -> None:
    admitted = parse_repository_grant(grant())
    assert RepositoryGrantV1.model_validate(admitted) is admitted
    assert parse_repository_grant(admitted.as_admitted()) == admitted


@pytest.mark.parametrize(
    "bounds",
    [{"min": 0, "max": 1}, {"min": 2, "max": 1}, {"min": True, "max": 1}, {"min": 1}],
)
def test_commit_count_model_alone_is_strict(bounds: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CommitCount.model_validate(bounds)
