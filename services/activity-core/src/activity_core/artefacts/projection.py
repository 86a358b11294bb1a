"""From a stored ops run row to what an operator may see of it (pure).

`result` is normalized again through the evidence allowlist before anything is read from
it, so a historic or hand-written row cannot show more than a fresh close would store;
then only the artefacts and the compact evidence are taken. The row's description (the
rendered task text) is never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from activity_core.artefacts.links import change_view_url, forgejo_file_url
from activity_core.artefacts.models import (
    Artifact,
    CompactEvidence,
    Disposition,
    FireOpsRun,
    MatchedBy,
)
from ops_contracts import RunState
from ops_evidence import (
    compact_execution_evidence,
    git_object_id,
    normalize_result,
    repo_path,
    sanitize_error,
    target_repo,
)

__all__ = ["artifacts_of", "compact_evidence_of", "disposition", "project_ops_run"]


def disposition(state: RunState, lease_until: datetime | None, now: datetime) -> Disposition:
    if state is RunState.open:
        return "queued"
    if state is RunState.claimed:
        return "running" if lease_until is not None and lease_until > now else "stalled"
    if state is RunState.succeeded:
        return "succeeded"
    if state is RunState.failed:
        return "failed"
    return "expired"


def artifacts_of(
    ops_run_id: Any,
    raw_result: object,
    forgejo_base: str,
    *,
    published_commit: object = None,
    has_changes: bool = False,
) -> list[Artifact]:
    """The files a run delivered: `result.path`, then `execution_evidence.artifact_refs`.

    All at the result's `head_after` (else the evidence's) in the result's `target_repo`;
    a repository the run did not report is not guessed from the queued one. Links tell
    the truth (links.py): a Forgejo link only at the commit an operator published;
    before that, the run's own change view of the file when its changes are stored.
    """
    result = normalize_result(raw_result)
    evidence = result.get("execution_evidence")
    evidence = evidence if isinstance(evidence, dict) else {}
    head = git_object_id(result.get("head_after")) or git_object_id(evidence.get("head_after"))
    repository = target_repo(result.get("target_repo"))
    published = git_object_id(published_commit)
    paths: list[str] = []
    primary = repo_path(result.get("path"))
    if primary is not None:
        paths.append(primary)
    refs = evidence.get("artifact_refs")
    for ref in refs if isinstance(refs, list) else []:
        path = repo_path(ref)
        if path is not None and path not in paths:
            paths.append(path)
    return [
        Artifact(
            ops_run_id=ops_run_id,
            path=path,
            head_after=head,
            target_repo=repository,
            forgejo_url=(
                forgejo_file_url(forgejo_base, repository, published, path)
                if published is not None
                else None
            ),
            change_url=(
                change_view_url(ops_run_id, path) if published is None and has_changes else None
            ),
        )
        for path in paths
    ]


def compact_evidence_of(raw_result: object) -> CompactEvidence:
    result = normalize_result(raw_result)
    compact = compact_execution_evidence(result.get("execution_evidence"))
    return CompactEvidence(**{key: str(value) for key, value in compact.items()})


def _labels(value: object) -> list[str]:
    return [label for label in value if isinstance(label, str)] if isinstance(value, list) else []


def project_ops_run(
    row: Mapping[str, Any], *, matched_by: MatchedBy, forgejo_base: str, now: datetime
) -> FireOpsRun:
    state = RunState(row["state"])
    raw_result = row["result"]
    return FireOpsRun(
        id=row["id"],
        title=row["title"],
        target_repo=row["target_repo"],
        state=state,
        disposition=disposition(state, row["lease_until"], now),
        attempt=row["attempt"],
        claim_owner=row["claim_owner"],
        lease_until=row["lease_until"],
        priority=row["priority"],
        labels=_labels(row["labels"]),
        last_error=sanitize_error(row["last_error"]) if row["last_error"] is not None else None,
        harness_profile_ref=row["harness_profile_ref"],
        triggering_event_id=row["triggering_event_id"],
        matched_by=matched_by,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        execution_evidence=compact_evidence_of(raw_result),
        artifacts=artifacts_of(
            row["id"],
            raw_result,
            forgejo_base,
            published_commit=row.get("published_commit"),
            has_changes=bool(row.get("has_changes")),
        ),
    )
