"""Forgejo links are built only from valid parts, each path segment percent-encoded."""

from __future__ import annotations

import pytest

from activity_core.artefacts.links import forgejo_file_url, split_org_repo, web_base

BASE = "https://forgejo.coulomb.social"
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("base", "repo", "head", "path", "expected"),
    [
        (
            BASE,
            "research/briefs",
            SHA,
            "briefs/2024-05-01.md",
            f"{BASE}/research/briefs/src/commit/{SHA}/briefs/2024-05-01.md",
        ),
        (
            BASE + "/",
            "research/briefs",
            "abc1234",
            "a.md",
            f"{BASE}/research/briefs/src/commit/abc1234/a.md",
        ),
        (
            "https://git.example.org/forgejo/",
            "ops/maintenance",
            "abc1234",
            "x/y.txt",
            "https://git.example.org/forgejo/ops/maintenance/src/commit/abc1234/x/y.txt",
        ),
        (
            "http://localhost:3000",
            "org/repo",
            "abc1234",
            "a b/c#d?e%f.md",
            "http://localhost:3000/org/repo/src/commit/abc1234/a%20b/c%23d%3Fe%25f.md",
        ),
        (
            BASE,
            "org/repo",
            "abc1234",
            "notes/über.md",
            f"{BASE}/org/repo/src/commit/abc1234/notes/%C3%BCber.md",
        ),
        (
            BASE,
            "org/repo",
            "abc1234",
            "a;b/c&d=e+f.md",
            f"{BASE}/org/repo/src/commit/abc1234/a%3Bb/c%26d%3De%2Bf.md",
        ),
        (BASE, "My.Org/my_repo-1", "abc1234", "f", f"{BASE}/My.Org/my_repo-1/src/commit/abc1234/f"),
        # a missing part: no link
        (BASE, None, SHA, "a.md", None),
        (BASE, "org/repo", None, "a.md", None),
        (BASE, "org/repo", SHA, None, None),
        (None, "org/repo", SHA, "a.md", None),
        # an invalid repository
        (BASE, "org", SHA, "a.md", None),
        (BASE, "org/repo/sub", SHA, "a.md", None),
        (BASE, "../repo", SHA, "a.md", None),
        (BASE, "org/..", SHA, "a.md", None),
        (BASE, "org/re po", SHA, "a.md", None),
        (BASE, "org/repo?x=1", SHA, "a.md", None),
        (BASE, "", SHA, "a.md", None),
        # an invalid commit
        (BASE, "org/repo", "ABCDEF1", "a.md", None),
        (BASE, "org/repo", "abc", "a.md", None),
        (BASE, "org/repo", "main", "a.md", None),
        (BASE, "org/repo", "../../x", "a.md", None),
        (BASE, "org/repo", "a" * 65, "a.md", None),
        # an invalid path
        (BASE, "org/repo", SHA, "../secret", None),
        (BASE, "org/repo", SHA, "a/../../b", None),
        (BASE, "org/repo", SHA, "/etc/passwd", None),
        (BASE, "org/repo", SHA, ".git/config", None),
        (BASE, "org/repo", SHA, "a/.GIT/config", None),
        (BASE, "org/repo", SHA, "a//b", None),
        (BASE, "org/repo", SHA, "a/", None),
        (BASE, "org/repo", SHA, "a\\b", None),
        (BASE, "org/repo", SHA, "a\nb", None),
        (BASE, "org/repo", SHA, "a\u202eb", None),
        (BASE, "org/repo", SHA, "", None),
        # an invalid base
        ("javascript:alert(1)//", "org/repo", SHA, "a.md", None),
        ("ftp://forgejo.example", "org/repo", SHA, "a.md", None),
        ("https://user:pw@forgejo.example", "org/repo", SHA, "a.md", None),
        ("https://forgejo.example?x=1", "org/repo", SHA, "a.md", None),
        ("https://forgejo.example#x", "org/repo", SHA, "a.md", None),
        ("//forgejo.example", "org/repo", SHA, "a.md", None),
        ("forgejo.example", "org/repo", SHA, "a.md", None),
        ("https://", "org/repo", SHA, "a.md", None),
        ("https://forgejo.example:99999", "org/repo", SHA, "a.md", None),
        (" https://forgejo.example", "org/repo", SHA, "a.md", None),
        ("https://forgejo example", "org/repo", SHA, "a.md", None),
        ("", "org/repo", SHA, "a.md", None),
        # values of the wrong type
        (BASE, ["org", "repo"], SHA, "a.md", None),
        (BASE, "org/repo", 1234567, "a.md", None),
        (BASE, "org/repo", SHA, ["a.md"], None),
    ],
)
def test_forgejo_file_url(
    base: object, repo: object, head: object, path: object, expected: str | None
) -> None:
    assert forgejo_file_url(base, repo, head, path) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("org/repo", ("org", "repo")),
        ("org", None),
        ("a/b/c", None),
        ("./repo", None),
        (None, None),
    ],
)
def test_split_org_repo(value: object, expected: tuple[str, str] | None) -> None:
    assert split_org_repo(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://forgejo.coulomb.social", "https://forgejo.coulomb.social"),
        ("https://forgejo.coulomb.social///", "https://forgejo.coulomb.social"),
        ("http://127.0.0.1:3000/git", "http://127.0.0.1:3000/git"),
        ("https://x.example\\@evil.example", None),
        ("data:text/html,hi", None),
    ],
)
def test_web_base(value: str, expected: str | None) -> None:
    assert web_base(value) == expected


def test_before_publication_a_file_links_to_its_diff_on_the_runs_own_page() -> None:
    from activity_core.artefacts.links import change_view_url
    from activity_core.changes.anchors import change_anchor

    run = "0b9e7a52-64a1-4bd6-9f39-0d3c3b1e2f10"
    assert change_view_url(run, "briefs/a b.md") == (
        f"/ops/ui/runs/{run}#{change_anchor('briefs/a b.md')}"
    )
    # the anchor is a hash: no path character reaches the URL
    hostile = 'x/"><script>.md'
    assert change_view_url(run, hostile) == f"/ops/ui/runs/{run}#{change_anchor(hostile)}"
    assert change_view_url("not-a-run", "a.md") is None
    assert change_view_url(run, "../escape") is None
