"""harness_profile_ref: structure only, and always version-pinned."""

import pytest

from ops_contracts import harness_profile_ref_error, parse_harness_profile_ref


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("harness.agent-dev@1.0.0", ("harness.agent-dev", "1.0.0")),
        ("harness.agent-dev-local@1.0.0", ("harness.agent-dev-local", "1.0.0")),
        ("h@0.0.0", ("h", "0.0.0")),
        ("0profile_x@10.20.30", ("0profile_x", "10.20.30")),
        ("harness.x@1.0.0-rc.1", ("harness.x", "1.0.0-rc.1")),
        ("harness.x@1.0.0+build.7", ("harness.x", "1.0.0+build.7")),
        ("a" * 128 + "@1.2.3", ("a" * 128, "1.2.3")),
    ],
)
def test_pinned_refs_are_valid(ref: str, expected: tuple[str, str]) -> None:
    assert harness_profile_ref_error(ref) is None
    assert parse_harness_profile_ref(ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        None,
        1,
        b"harness.x@1.0.0",
        "",
        "harness.x",
        "harness.x@",
        "@1.0.0",
        "harness.x@1",
        "harness.x@1.0",
        "harness.x@1.x",
        "harness.x@latest",
        "harness.x@^1.0.0",
        "harness.x@~1.0.0",
        "harness.x@1.0.*",
        "harness.x@>=1.0.0",
        "harness.x@v1.0.0",
        " harness.x@1.0.0",
        "harness.x@1.0.0 ",
        "harness.x@1.0.0\n",
        "harness .x@1.0.0",
        "harness.x@1.0.0\u00a0",
        "harness.x@@1.0.0",
        "harness.x@1.0.0@1.0.0",
        "Harness.x@1.0.0",
        ".harness@1.0.0",
        "-harness@1.0.0",
        "harness/x@1.0.0",
        "a" * 129 + "@1.0.0",
        "harness.x@1.0.0-",
        "harness.x@1.0.0-rc!",
        "harness.x@\u0661.\u0660.\u0660",  # Arabic-Indic digits are not [0-9]
        "harness.x@1.0.0-" + "a" * 300,
    ],
)
def test_unpinned_or_malformed_refs_are_invalid(ref: object) -> None:
    error = harness_profile_ref_error(ref)
    assert isinstance(error, str)
    assert error
    if isinstance(ref, str):
        with pytest.raises(ValueError):
            parse_harness_profile_ref(ref)
