"""Pattern and path rules, and what a grant lets a run touch."""

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ops_contracts import (
    parse_repository_grant,
    path_allowed,
    path_pattern_error,
    repository_path_error,
)
from ops_contracts.grant import RepositoryGrantV1


def granting(*patterns: str) -> RepositoryGrantV1:
    return parse_repository_grant(
        {
            "version": "1",
            "allowed_paths": list(patterns),
            "commit_count": {"min": 1, "max": 1},
            "publish": False,
        }
    )


@pytest.mark.parametrize("path", ["README.md", "docs/a.md", "a/b/c/d.txt", "docs/*.md", "a?b"])
def test_good_concrete_paths(path: str) -> None:
    assert repository_path_error(path) is None


@pytest.mark.parametrize(
    "path",
    [
        "",
        "docs/",
        "/docs/a.md",
        "~/a",
        "docs\\a.md",
        "C:/a",
        "docs//a.md",
        "./a",
        "docs/../a",
        ".git/config",
        "sub/.GIT/HEAD",
        "a\x00b",
        "a" * 257,
        None,
        7,
    ],
)
def test_bad_concrete_paths(path: object) -> None:
    assert repository_path_error(path)


def test_pattern_and_path_errors_are_human_text() -> None:
    assert path_pattern_error("docs/") is None
    assert path_pattern_error("docs/**/x") is None
    message = path_pattern_error("../x")
    assert message is not None
    assert ".." in message
    # Wildcard rules apply to patterns only; in a concrete path they are characters.
    assert path_pattern_error("a**b") is not None
    assert repository_path_error("a**b") is None


ALLOWED_CASES: list[tuple[tuple[str, ...], str, bool]] = [
    # a directory pattern: everything beneath it, not the name itself
    (("docs/",), "docs/a.md", True),
    (("docs/",), "docs/x/y/z.md", True),
    (("docs/",), "docs", False),
    (("docs/",), "docsx/a.md", False),
    (("docs/",), "other/docs/a.md", False),
    (("docs/api/",), "docs/api/v1.md", True),
    (("docs/api/",), "docs/a.md", False),
    # exact paths
    (("README.md",), "README.md", True),
    (("README.md",), "readme.md", False),
    (("README.md",), "x/README.md", False),
    (("README.md",), "README.mdx", False),
    (("README.md",), "README.md/x", False),
    # * and ? stay within one segment
    (("*.md",), "a.md", True),
    (("*.md",), ".md", True),
    (("*.md",), "dir/a.md", False),
    (("docs/*.md",), "docs/a.md", True),
    (("docs/*.md",), "docs/sub/a.md", False),
    (("docs/*",), "docs/a", True),
    (("docs/*",), "docs/a/b", False),
    (("a?c",), "abc", True),
    (("a?c",), "ac", False),
    (("a?c",), "abbc", False),
    (("a?c",), "a/c", False),
    (("*a*b",), "xxaxxb", True),
    (("*a*b",), "xxaxxbc", False),
    # ** spans segments
    (("src/**/*.py",), "src/a.py", True),
    (("src/**/*.py",), "src/x/y/a.py", True),
    (("src/**/*.py",), "src/a.txt", False),
    (("src/**/*.py",), "lib/a.py", False),
    (("**/README.md",), "README.md", True),
    (("**/README.md",), "a/b/README.md", True),
    (("**/README.md",), "a/b/README.txt", False),
    (("docs/**",), "docs/a", True),
    (("docs/**",), "docs/a/b", True),
    (("docs/**",), "docs", False),
    (("a/**/b/**/c",), "a/b/c", True),
    (("a/**/b/**/c",), "a/x/b/y/z/c", True),
    (("a/**/b/**/c",), "a/c", False),
    (("**/**/x",), "x", True),
    (("**",), "anything/at/all.txt", True),
    # "**/" is "beneath any directory, the root included", i.e. the same as "**"
    (("**/",), "a/b", True),
    (("**/",), "a", True),
    # brackets are not character classes
    (("[ab].md",), "a.md", False),
    (("[ab].md",), "[ab].md", True),
    # case-sensitive
    (("Docs/",), "docs/a", False),
    # several patterns: any one suffices
    (("docs/", "*.md"), "README.md", True),
    (("docs/", "*.md"), "src/a.py", False),
    # .git is never touchable, whatever the pattern
    (("**",), ".git/config", False),
    (("**",), "x/.GIT/HEAD", False),
    (("*",), ".git", False),
    (("**/config",), ".git/config", False),
    (("sub/",), "sub/.git", False),
    (("**",), ".gitignore", True),
    (("**",), ".gitmodules", True),
    # invalid concrete paths are never allowed
    (("docs/",), "docs/../etc/passwd", False),
    (("docs/",), "/docs/a", False),
    (("docs/",), "docs//a", False),
    (("docs/",), "docs/./a", False),
    (("docs/",), "docs\\a", False),
    (("docs/",), "docs/a/", False),
    (("**",), "", False),
    (("**",), "C:/x", False),
]


@pytest.mark.parametrize(("patterns", "path", "expected"), ALLOWED_CASES)
def test_path_allowed(patterns: tuple[str, ...], path: str, expected: bool) -> None:
    assert path_allowed(granting(*patterns), path) is expected


def test_non_string_path_is_not_allowed() -> None:
    assert path_allowed(granting("**"), 1) is False  # type: ignore[arg-type]


def test_pathological_patterns_stay_fast() -> None:
    # A naive regex translation backtracks exponentially on these.
    segment_heavy = "**/" + "a/**/" * 40 + "b"
    glob_heavy = "*a" * 100 + "b"
    admitted = granting(segment_heavy, glob_heavy)
    started = time.monotonic()
    assert not path_allowed(admitted, "a/" * 120 + "c")
    assert not path_allowed(admitted, "a" * 250)
    assert time.monotonic() - started < 2.0


segments = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N"], include_characters="._-"),
    min_size=1,
    max_size=8,
).filter(lambda s: s not in (".", "..") and s.lower() != ".git")
paths = st.lists(segments, min_size=1, max_size=6).map("/".join)


@given(paths)
def test_a_path_is_allowed_by_itself_and_by_each_ancestor_directory(path: str) -> None:
    parts = path.split("/")
    assert path_allowed(granting(path), path)
    assert path_allowed(granting("**"), path)
    for depth in range(1, len(parts)):
        assert path_allowed(granting("/".join(parts[:depth]) + "/"), path)
    assert not path_allowed(granting(path + "/"), path)


@given(paths, st.integers(min_value=0, max_value=6), st.sampled_from([".git", ".GIT", ".Git"]))
def test_a_git_segment_is_never_allowed(path: str, position: int, git: str) -> None:
    parts = path.split("/")
    parts.insert(min(position, len(parts)), git)
    assert not path_allowed(granting("**", "*", "**/*", "**/"), "/".join(parts))
