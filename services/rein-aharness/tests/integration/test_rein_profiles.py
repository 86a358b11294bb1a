"""The profile catalogue and execution selection (pure: no database, no git)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rein_aharness.profiles import (
    CatalogueError,
    ClosePath,
    Legacy,
    ProfileCatalogue,
    Profiled,
    ProfileRefusal,
    Refused,
    load_catalogue,
    render_output_path,
    select_execution,
)
from rein_worker_kit import CATALOGUE, GRANT, ops_run

LEGACY = """\
legacy_approaches:
  legacy-check:
    approach: command
    command: {argv: ["true"], timeout_s: 5}
"""


@pytest.fixture
def catalogue() -> ProfileCatalogue:
    return ProfileCatalogue.from_yaml(CATALOGUE + LEGACY)


def _profile(**overrides: Any) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "id": "harness.x",
        "version": "1.0.0",
        "approach": "command",
        "command": {"argv": ["make", "docs"], "timeout_s": 60},
        "sandbox_profile": "profile.bwrap-local",
        "resolved_model": None,
        "rein": {"id": "rein-aharness", "version": "0.1.0"},
    }
    profile.update(overrides)
    return profile


def test_the_shipped_example_catalogue_loads() -> None:
    example = Path(__file__).parents[4] / "examples" / "profiles.yaml"
    loaded = load_catalogue(example)
    assert "harness.agent-dev@1.0.0" in loaded.refs


def test_profiles_resolve_by_their_exact_pinned_ref(catalogue: ProfileCatalogue) -> None:
    profile = catalogue.resolve("harness.brief@1.0.0")
    assert (profile.ref, profile.approach, profile.resolved_model) == (
        "harness.brief@1.0.0",
        "brief",
        None,
    )


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        (None, "carries no harness_profile_ref"),
        ("", "must not be empty"),
        ("harness.brief", "exactly one '@'"),
        ("harness.brief@1", "pinned"),
        ("harness.brief@1.0", "pinned"),
        ("harness.brief@^1.0.0", "pinned"),
        ("harness.brief@1.0.*", "pinned"),
        ("harness.brief@latest", "pinned"),
        ("harness.brief@1.0.0 ", "whitespace"),
        ("Harness.Brief@1.0.0", "harness profile id"),
        ("harness.brief@2.0.0", "is not in the profile catalogue"),
        ("harness.unknown@1.0.0", "is not in the profile catalogue"),
        (42, "must be a string"),
    ],
)
def test_resolution_refuses_anything_but_an_exact_catalogued_pin(
    catalogue: ProfileCatalogue, ref: object, problem: str
) -> None:
    with pytest.raises(ProfileRefusal) as refused:
        catalogue.resolve(ref)
    assert problem in refused.value.reason


@pytest.mark.parametrize(
    ("data", "where", "problem"),
    [
        ({"profiles": [_profile(version="1.0")]}, "profiles[0]", "pinned"),
        ({"profiles": [_profile(version=1)]}, "profiles[0].version", "valid string"),
        ({"profiles": [_profile(extra=1)]}, "profiles[0].extra", "Extra inputs"),
        ({"profiles": [_profile(command=None)]}, "profiles[0]", "needs its `command`"),
        (
            {"profiles": [_profile(brief={"output_path": "x.md"})]},
            "profiles[0]",
            "takes no `brief`",
        ),
        (
            {"profiles": [_profile(command={"argv": ["a"], "timeout_s": "60"})]},
            "profiles[0].command.timeout_s",
            "valid number",
        ),
        (
            {"profiles": [_profile(command={"argv": [], "timeout_s": 60})]},
            "profiles[0].command.argv",
            "at least 1",
        ),
        (
            {
                "profiles": [
                    _profile(
                        command={
                            "argv": ["a"],
                            "timeout_s": 1,
                            "env_allowlist": ["PATH", "ACTIVITY_CORE_WORKER_TOKEN"],
                        }
                    )
                ]
            },
            "profiles[0].command.env_allowlist",
            "never passed to an approach",
        ),
        (
            {
                "profiles": [
                    _profile(
                        approach="brief",
                        command=None,
                        brief={"output_path": "briefs/{when}.md"},
                    )
                ]
            },
            "profiles[0].brief.output_path",
            "unknown placeholder {when}",
        ),
        (
            {
                "profiles": [
                    _profile(approach="brief", command=None, brief={"output_path": ".git/x"})
                ]
            },
            "profiles[0].brief.output_path",
            ".git segment",
        ),
        ({"profiles": [_profile(sandbox_profile="has space")]}, "profiles[0].sandbox_profile", ""),
        ({"profiles": [_profile(), _profile()]}, "profiles[1]", "listed twice"),
        (
            {"profiles": [], "legacy_approaches": {"x": {"approach": "brief"}}},
            "legacy_approaches.x",
            "",
        ),
        ({"profile": []}, "profiles", "Field required"),
        ([], "catalogue", "valid dictionary"),
    ],
)
def test_a_bad_catalogue_is_refused_with_where_and_why(
    data: object, where: str, problem: str
) -> None:
    with pytest.raises(CatalogueError) as refused:
        ProfileCatalogue.from_data(data)
    assert str(refused.value).startswith(where)
    assert problem in str(refused.value)


def test_a_repeated_yaml_key_is_refused_not_overwritten() -> None:
    with pytest.raises(CatalogueError, match="duplicate key 'profiles'"):
        ProfileCatalogue.from_yaml("profiles: []\nprofiles: []\n")


def test_unreadable_or_oversized_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match="cannot read"):
        load_catalogue(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("#" * (1024 * 1024 + 1))
    with pytest.raises(CatalogueError, match="larger than"):
        load_catalogue(big)


# -- selection --------------------------------------------------------------------------


def test_a_resolved_profile_is_selected_with_its_grant(catalogue: ProfileCatalogue) -> None:
    selection = select_execution(
        ops_run(harness_profile_ref="harness.brief@1.0.0", repository_grant=GRANT), catalogue
    )
    assert isinstance(selection, Profiled)
    assert selection.profile.ref == "harness.brief@1.0.0"
    assert selection.grant is not None and selection.grant.as_admitted() == GRANT


@pytest.mark.parametrize("ref", ["harness.unknown@1.0.0", "harness.brief", ""])
def test_the_hint_never_stands_in_for_an_invalid_ref(catalogue: ProfileCatalogue, ref: str) -> None:
    run = ops_run(harness_profile_ref=ref, approach_hint="legacy-check", repository_grant=None)
    selection = select_execution(run, catalogue)
    assert isinstance(selection, Refused)
    assert selection.close_path is ClosePath.outbox


def test_the_hint_never_overrides_a_valid_ref(catalogue: ProfileCatalogue) -> None:
    run = ops_run(
        harness_profile_ref="harness.brief@1.0.0",
        approach_hint="legacy-check",
        repository_grant=GRANT,
    )
    assert isinstance(select_execution(run, catalogue), Profiled)


def test_a_grant_without_a_ref_is_refused_even_with_a_known_hint(
    catalogue: ProfileCatalogue,
) -> None:
    run = ops_run(harness_profile_ref=None, approach_hint="legacy-check", repository_grant=GRANT)
    selection = select_execution(run, catalogue)
    assert isinstance(selection, Refused)
    assert selection.close_path is ClosePath.outbox
    assert "no harness_profile_ref" in selection.reason


def test_an_invalid_queued_grant_is_refused(catalogue: ProfileCatalogue) -> None:
    run = ops_run(
        harness_profile_ref="harness.brief@1.0.0", repository_grant={**GRANT, "publish": True}
    )
    selection = select_execution(run, catalogue)
    assert isinstance(selection, Refused)
    assert "repository grant is invalid" in selection.reason


def test_a_profile_absent_grantless_row_takes_the_legacy_table(
    catalogue: ProfileCatalogue,
) -> None:
    selection = select_execution(
        ops_run(harness_profile_ref=None, approach_hint="legacy-check"), catalogue
    )
    assert isinstance(selection, Legacy)
    assert selection.approach_hint == "legacy-check"
    missing = select_execution(ops_run(harness_profile_ref=None, approach_hint=None), catalogue)
    assert isinstance(missing, Refused) and missing.close_path is ClosePath.direct


# -- the brief output path ---------------------------------------------------------------


def test_the_output_path_renders_deterministically_from_theops_run() -> None:
    run = ops_run(
        id="6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
        idempotency_key="fi-daily-brief:daily-brief:scheduled:2026-01-05T06:00:00+01:00",
        triggering_event_id="scheduled:2026-01-05T06:00:00+01:00",
    )
    template = "briefs/{activity}/{date}-{run_id}.md"
    path = render_output_path(template, run)
    assert path == "briefs/fi-daily-brief/2026-01-05-6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f.md"
    assert render_output_path(template, run) == path
    manual = ops_run(
        triggering_event_id="manual:abc", created_at=datetime(2026, 2, 3, 23, 30, tzinfo=UTC)
    )
    assert render_output_path("briefs/{date}.md", manual) == "briefs/2026-02-03.md"
