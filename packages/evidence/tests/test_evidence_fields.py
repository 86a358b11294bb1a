"""The scalar and list validators the allowlists are built from."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ops_evidence import (
    MAX_COLLECTION_ITEMS,
    MAX_IDENTIFIER_CHARS,
    MAX_INT,
    MAX_LIST_ENCODED_BYTES,
    MAX_PATH_CHARS,
    encoded_size,
    git_object_id,
    git_object_id_list,
    identifier,
    identifier_list,
    non_negative_int,
    non_negative_number,
    repo_path,
    repo_path_list,
    target_repo,
)


def _cases(validator: Callable[[object], object], values: list[object]) -> list[object]:
    """`validator` with each value, as parameters named for both."""
    return [
        pytest.param(validator, value, id=f"{validator.__name__}-{value!r:.40}") for value in values
    ]


@pytest.mark.parametrize(
    ("validator", "value"),
    [
        *_cases(
            identifier,
            ["a", "harness.agent-dev@1.0.0", "sha256:0f", "x" * MAX_IDENTIFIER_CHARS, '"\\'],
        ),
        *_cases(git_object_id, ["abc1234", "0" * 40, "f" * 64]),
        *_cases(
            repo_path,
            [
                "README.md",
                "briefs/2024-01-01.md",
                "a/.gitignore",
                "a/..b/c",
                "docs/résumé 😀.md",
                "x" * 1024,
            ],
        ),
        *_cases(target_repo, ["ops-queue", "coulomb/ops-queue", "a.b_c-d/e", "x" * 256]),
    ],
)
def test_valid_values_are_returned_unchanged(
    validator: Callable[[object], object], value: str
) -> None:
    assert validator(value) == value


@pytest.mark.parametrize(
    ("validator", "value"),
    [
        *_cases(
            identifier,
            [
                "",
                "x" * (MAX_IDENTIFIER_CHARS + 1),
                " padded",
                "padded ",
                "in side",
                "tab\t",
                "nul\x00",
                "caf\u00e9",
                "bidi\u202e",
                1,
                None,
                ["a"],
            ],
        ),
        *_cases(
            git_object_id,
            ["abc123", "0" * 65, "ABC1234", "abc123g", "abc1234\n", " abc1234", 1234567],
        ),
        *_cases(
            repo_path,
            [
                "",
                "x" * (MAX_PATH_CHARS + 1),
                "/etc/passwd",
                "a\\b",
                "a/../b",
                "..",
                "./a",
                "a/.",
                "a//b",
                "docs/",
                ".git/config",
                "a/.GIT/HEAD",
                "a\x00b",
                "a\nb",
                "a\u202eb",
                "a\ud800",
                b"README.md",
            ],
        ),
        *_cases(
            target_repo,
            ["", "x" * 257, "/a", "a/", "a//b", "a/..", "../a", ".", "a b", "a\n", "ä"],
        ),
    ],
)
def test_invalid_values_are_refused(validator: Callable[[object], object], value: object) -> None:
    assert validator(value) is None


def test_identifier_subclass_is_refused() -> None:
    class Text(str):
        pass

    assert identifier(Text("abc")) is None


def test_non_negative_int() -> None:
    assert non_negative_int(0) == 0
    assert non_negative_int(MAX_INT) == MAX_INT
    for value in (-1, MAX_INT + 1, True, False, 1.0, "1", None):
        assert non_negative_int(value) is None


def test_non_negative_number() -> None:
    assert non_negative_number(0) == 0
    assert non_negative_number(12.4) == 12.4
    assert non_negative_number(1e300) == 1e300
    for value in (-0.5, -1, float("nan"), float("inf"), True, MAX_INT + 1, "1"):
        assert non_negative_number(value) is None


def test_lists_drop_invalid_items_and_keep_order() -> None:
    assert identifier_list(["b", " ", 3, "a", None, "b"]) == ["b", "a", "b"]
    assert git_object_id_list(["abc1234", "XYZ", "def5678"]) == ["abc1234", "def5678"]
    assert repo_path_list(["a.md", "/abs", "b/c.md"]) == ["a.md", "b/c.md"]


def test_empty_list_stays_empty_but_an_all_invalid_list_is_absent() -> None:
    assert identifier_list([]) == []
    assert identifier_list([" ", 1]) is None
    assert identifier_list("abc") is None
    assert identifier_list(("a",)) is None


def test_lists_keep_at_most_max_collection_items() -> None:
    refs = [f"ref-{n}" for n in range(MAX_COLLECTION_ITEMS + 5)]
    assert identifier_list(refs) == refs[:MAX_COLLECTION_ITEMS]


def test_lists_keep_the_prefix_that_fits_the_byte_budget() -> None:
    refs = ["x" * MAX_IDENTIFIER_CHARS] * MAX_COLLECTION_ITEMS
    kept = identifier_list(refs)
    assert kept is not None
    assert 0 < len(kept) < MAX_COLLECTION_ITEMS
    assert encoded_size(kept) <= MAX_LIST_ENCODED_BYTES
    assert encoded_size([*kept, refs[0]]) > MAX_LIST_ENCODED_BYTES
    assert identifier_list(kept) == kept
