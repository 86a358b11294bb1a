"""What crosses Temporal for PublishChangesWorkflow: plain dataclasses of JSON values (the
SDK's default converter), importable by the workflow sandbox. Add fields with defaults;
never rename or remove one (running histories decode them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PUBLICATION_REFUSED",
    "PUBLISH_WORKFLOW_NAME",
    "PublicationFailedInput",
    "PublishChangesInput",
    "PublishChangesResult",
    "PullRequestInput",
    "PushResult",
    "publication_workflow_id",
]

# The workflow type by name: the API starts it without importing the worker's code.
PUBLISH_WORKFLOW_NAME = "PublishChangesWorkflow"
# The error type of a refusal (a tampered bundle, a taken ref): final, never retried.
PUBLICATION_REFUSED = "PublicationRefused"


def publication_workflow_id(run_id: str) -> str:
    """One id per run: Temporal then runs at most one publication of a run at a time, and
    (ALLOW_DUPLICATE_FAILED_ONLY, temporal/publication_start.py) never one after a
    publication that completed."""
    return f"publish-changes:{run_id}"


@dataclass(frozen=True)
class PublishChangesInput:
    run_id: str
    attempt: int
    requested_by: str
    requested_at: str  # ISO 8601, as the API's pending row has it


@dataclass(frozen=True)
class PushResult:
    ref: str
    commit: str
    pushed: bool
    default_branch: str  # refs/heads/<name>
    target_repo: str
    title: str
    pull_requests: bool  # Forgejo is configured on this worker


@dataclass(frozen=True)
class PullRequestInput:
    publication: PublishChangesInput
    push: PushResult


@dataclass(frozen=True)
class PublicationFailedInput:
    publication: PublishChangesInput
    reason: str


@dataclass(frozen=True)
class PublishChangesResult:
    state: str
    ref: str
    commit: str
    pull_request_url: str | None = None
    error: str | None = None
