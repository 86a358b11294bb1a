"""grant_id and acceptance_policy_id: stable, documented, and recomputable."""

import hashlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ops_contracts import acceptance_policy_id, grant_id, parse_repository_grant


def admit(paths: list[str], low: int = 1, high: int = 1) -> Any:
    return parse_repository_grant(
        {
            "version": "1",
            "allowed_paths": paths,
            "commit_count": {"min": low, "max": high},
            "publish": False,
        }
    )


def test_grant_id_is_the_documented_digest_of_the_admitted_grant() -> None:
    canonical = (
        b'{"allowed_paths":["docs/","README.md"],"commit_count":{"max":1,"min":1},'
        b'"publish":false,"version":"1"}'
    )
    expected = hashlib.sha256(b"ops-repository-grant/v1\n" + canonical).hexdigest()
    assert grant_id(admit(["docs/", "README.md"])) == "rg1-" + expected


def test_acceptance_policy_id_is_the_documented_digest_of_the_sorted_policy() -> None:
    canonical = (
        b'{"allowed_paths":["README.md","docs/"],"commit_count":{"max":1,"min":1},"publish":false}'
    )
    expected = hashlib.sha256(b"ops-acceptance-policy/v1\n" + canonical).hexdigest()
    assert acceptance_policy_id(admit(["docs/", "README.md"])) == "ap1-" + expected


def test_golden_values_never_change() -> None:
    # Both services and already-queued rows depend on these exact strings.
    admitted = admit(["docs/", "README.md"])
    assert grant_id(admitted) == (
        "rg1-70c4ed6c3bd55857ddf0afc24cac1032f1d4b9708b9a3300cf0a09c793910caf"
    )
    assert acceptance_policy_id(admitted) == (
        "ap1-ee7f3823e2e535eff1d33c165c3c565fbb219a6790773071b6a6c40e733546c7"
    )


def test_key_order_of_the_declaration_does_not_matter() -> None:
    one = parse_repository_grant(
        {
            "version": "1",
            "allowed_paths": ["docs/", "README.md"],
            "commit_count": {"min": 1, "max": 2},
            "publish": False,
        }
    )
    other = parse_repository_grant(
        {
            "publish": False,
            "commit_count": {"max": 2, "min": 1},
            "allowed_paths": ["docs/", "README.md"],
            "version": "1",
        }
    )
    assert grant_id(one) == grant_id(other)
    assert acceptance_policy_id(one) == acceptance_policy_id(other)


def test_path_order_changes_the_grant_but_not_the_policy() -> None:
    one, other = admit(["docs/", "README.md"]), admit(["README.md", "docs/"])
    assert grant_id(one) != grant_id(other)
    assert acceptance_policy_id(one) == acceptance_policy_id(other)


def test_what_is_permitted_changes_both_ids() -> None:
    base = admit(["docs/"])
    for changed in (admit(["docs/", "README.md"]), admit(["doc/"]), admit(["docs/"], 1, 2)):
        assert grant_id(changed) != grant_id(base)
        assert acceptance_policy_id(changed) != acceptance_policy_id(base)


def test_ids_are_distinct_kinds() -> None:
    admitted = admit(["docs/"])
    assert grant_id(admitted).startswith("rg1-")
    assert acceptance_policy_id(admitted).startswith("ap1-")
    assert len(grant_id(admitted)) == len(acceptance_policy_id(admitted)) == 4 + 64


@given(st.permutations(["a/", "b.md", "c/**/*.py", "d?"]))
def test_policy_id_ignores_pattern_order(paths: list[str]) -> None:
    assert acceptance_policy_id(admit(paths)) == acceptance_policy_id(
        admit(["a/", "b.md", "c/**/*.py", "d?"])
    )
