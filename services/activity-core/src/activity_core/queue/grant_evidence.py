"""Does a close's repository evidence match the grant the run was queued with? (pure)

The worker reports the grant id and acceptance-policy id it derived from the queued grant;
activity-core recomputes both with the same contracts functions. A completion of a granted
run must also carry positive acceptance evidence inside the grant's bounds. A failure may
omit transaction evidence (setup never began), but whatever it supplies must match.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ops_contracts import (
    CloseAction,
    GrantValidationError,
    acceptance_policy_id,
    grant_id,
    parse_repository_grant,
    path_allowed,
)

__all__ = ["StoredChangesRow", "changes_evidence_problem", "grant_evidence_problem"]


class StoredChangesRow(Protocol):
    """An ops_run_changes row as the driver returns it (asyncpg.Record, or a dict)."""

    def __getitem__(self, key: str, /) -> Any: ...


def grant_evidence_problem(
    action: CloseAction,
    queued_grant: Mapping[str, Any] | None,
    transaction: Mapping[str, Any] | None,
) -> str | None:
    """None when the evidence is acceptable, else why it conflicts with the queued grant."""
    if queued_grant is None:
        if transaction and (
            transaction.get("grant_id") is not None
            or transaction.get("acceptance_policy_id") is not None
        ):
            return "the run carries no repository grant but the result claims one"
        return None

    try:
        grant = parse_repository_grant(dict(queued_grant))
    except GrantValidationError:
        # A stored grant that no longer validates cannot authorize anything: fail closed.
        return "the queued repository grant is not a valid grant v1"

    if transaction is None:
        if action is CloseAction.complete:
            return "a granted run completes only with result.repository_transaction evidence"
        return None

    expected_grant = grant_id(grant)
    expected_policy = acceptance_policy_id(grant)
    supplied_grant = transaction.get("grant_id")
    supplied_policy = transaction.get("acceptance_policy_id")

    if action is CloseAction.fail:
        if supplied_grant is not None and supplied_grant != expected_grant:
            return "repository_transaction.grant_id does not match the queued grant"
        if supplied_policy is not None and supplied_policy != expected_policy:
            return "repository_transaction.acceptance_policy_id does not match the queued grant"
        return None

    if supplied_grant != expected_grant:
        return "repository_transaction.grant_id does not match the queued grant"
    if supplied_policy != expected_policy:
        return "repository_transaction.acceptance_policy_id does not match the queued grant"
    if transaction.get("acceptance") != "accepted":
        return "a granted completion needs repository_transaction.acceptance = accepted"
    commits = transaction.get("accepted_commits")
    if not isinstance(commits, list):
        return "a granted completion needs repository_transaction.accepted_commits"
    bounds = grant.commit_count
    if not bounds.min <= len(commits) <= bounds.max:
        return (
            f"{len(commits)} accepted commits is outside the grant's "
            f"commit_count {bounds.min}..{bounds.max}"
        )
    paths = transaction.get("accepted_paths")
    if not isinstance(paths, list):
        return "a granted completion needs repository_transaction.accepted_paths"
    outside = [p for p in paths if not (isinstance(p, str) and path_allowed(grant, p))]
    if outside:
        return "an accepted path lies outside the grant's allowed_paths"
    return None


def changes_evidence_problem(
    result: Mapping[str, Any] | None, stored: StoredChangesRow
) -> str | None:
    """None when a granted completion's evidence names exactly the changes stored for its
    attempt (ops_run_changes, docs/changes.md "Close"), else what differs."""
    result = result or {}
    transaction = result.get("repository_transaction") or {}
    if transaction.get("changes_digest") != stored["digest"]:
        return (
            "repository_transaction.changes_digest is not the digest of the changes stored "
            f"for this attempt ({stored['digest']})"
        )
    if transaction.get("baseline_digest") != stored["baseline"]:
        return "repository_transaction.baseline_digest is not the stored changes' baseline"
    if result.get("head_after") != stored["head_after"]:
        return "result.head_after is not the stored changes' tip"
    if list(transaction.get("accepted_commits") or []) != list(stored["commits"]):
        return "repository_transaction.accepted_commits are not the stored changes' commits"
    return None
