"""The activities of PublishChangesWorkflow (temporal/publication_workflow.py).

- `push`: reads the run (its own row: head_after, baseline and accepted commits from its
  evidence, its grant) and its stored bundle, and runs remote_git.push_changes. A
  refusal (PublishRefused, a run that cannot be published) is recorded `failed` here and
  raised as a non-retryable PUBLICATION_REFUSED; the remote or the database away is
  retried by the workflow. Success is recorded `published` before the activity answers,
  so a worker killed after the push leaves either a recorded publication or one that the
  retry finds on the remote at head_after (no second push).
- `pull_request`: finds or opens the pull request (forgejo.py), records its URL; a
  refusal is recorded as the published row's error (the branch is there anyway).
- `mark_failed`: the workflow's last word when the push's retries ran out.

Each heartbeats while it works, so a worker killed mid-publication is noticed within the
heartbeat timeout and another worker takes the activity.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activity_core.publication import queries
from activity_core.publication.forgejo import (
    Forgejo,
    ForgejoFailed,
    ForgejoUnavailable,
    pull_request_body,
)
from activity_core.publication.payloads import (
    PUBLICATION_REFUSED,
    PublicationFailedInput,
    PublishChangesInput,
    PullRequestInput,
    PushResult,
)
from activity_core.publication.record import record_failed, record_published, record_pull_request
from activity_core.publication.remote_git import (
    PublishFacts,
    PublishRefused,
    RemoteUnavailable,
    push_changes,
    remote_for,
)
from activity_core.settings import ActivityCoreSettings
from ops_contracts import GrantValidationError, parse_repository_grant
from ops_evidence import git_object_id, normalize_result

__all__ = ["PublicationActivities"]

_HEARTBEAT_SECONDS = 2.0


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(_HEARTBEAT_SECONDS)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class PublicationActivities:
    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: ActivityCoreSettings,
        *,
        forgejo_transport: Any = None,
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._forgejo_transport = forgejo_transport

    def all(self) -> list[Callable[..., Any]]:
        return [self.push, self.pull_request, self.mark_failed, self.pull_request_gave_up]

    async def _refuse(self, params: PublishChangesInput, reason: str) -> ApplicationError:
        await record_failed(self._pool, params, reason)
        return ApplicationError(reason, type=PUBLICATION_REFUSED, non_retryable=True)

    @activity.defn(name="publication_push")
    async def push(self, params: PublishChangesInput) -> PushResult:
        async with _heartbeating():
            row = await self._pool.fetchrow(queries.PUBLISH_FACTS, uuid.UUID(params.run_id))
            problem, facts = _facts_of(row, params)
            if problem is not None:
                raise await self._refuse(params, problem)
            assert row is not None and facts is not None
            template = self._settings.repository_url
            if template is None:
                raise await self._refuse(
                    params, "ACTIVITY_CORE_REPOSITORY_URL is not set on the Temporal worker"
                )
            bundle = await self._pool.fetchval(
                queries.GET_BUNDLE, uuid.UUID(params.run_id), params.attempt
            )
            if bundle is None:
                raise await self._refuse(params, "the run's changes are no longer stored")
            remote = remote_for(
                template,
                row["target_repo"],
                username=self._settings.repository_username,
                token_file=self._settings.repository_token_file,
            )
            try:
                outcome = await push_changes(remote, bytes(bundle), facts)
            except PublishRefused as exc:
                raise await self._refuse(params, exc.reason) from None
            except RemoteUnavailable as exc:
                raise ApplicationError(str(exc), type="RemoteUnavailable") from None
            await record_published(self._pool, params, outcome.commit)
            activity.logger.info(
                "run %s published at %s (%s)",
                params.run_id,
                outcome.ref,
                "pushed" if outcome.pushed else "already there",
            )
            return PushResult(
                ref=outcome.ref,
                commit=outcome.commit,
                pushed=outcome.pushed,
                default_branch=outcome.default_branch,
                target_repo=row["target_repo"],
                title=row["title"],
                pull_requests=self._settings.forgejo_api_url is not None,
            )

    @activity.defn(name="publication_pull_request")
    async def pull_request(self, params: PullRequestInput) -> str | None:
        api_url = self._settings.forgejo_api_url
        token_file = self._settings.forgejo_token_file
        if api_url is None or token_file is None:
            return None
        forgejo = Forgejo(api_url=api_url, token_file=token_file, transport=self._forgejo_transport)
        push = params.push
        async with _heartbeating():
            try:
                url = await forgejo.open_pull_request(
                    push.target_repo,
                    head=push.ref.removeprefix("refs/heads/"),
                    base=push.default_branch.removeprefix("refs/heads/"),
                    title=push.title,
                    body=pull_request_body(params.publication.run_id, self._settings.public_url),
                )
            except ForgejoFailed as exc:
                reason = f"the pull request could not be opened: {exc}"
                await record_pull_request(self._pool, params.publication, None, reason)
                return None
            except ForgejoUnavailable as exc:
                raise ApplicationError(str(exc), type="ForgejoUnavailable") from None
            await record_pull_request(self._pool, params.publication, url, None)
            return url

    @activity.defn(name="publication_pull_request_gave_up")
    async def pull_request_gave_up(self, params: PublicationFailedInput) -> None:
        """The pull request's retries ran out: the published row says so."""
        await record_pull_request(self._pool, params.publication, None, params.reason)

    @activity.defn(name="publication_mark_failed")
    async def mark_failed(self, params: PublicationFailedInput) -> None:
        await record_failed(self._pool, params.publication, params.reason)


def _facts_of(
    row: asyncpg.Record | None, params: PublishChangesInput
) -> tuple[str | None, PublishFacts | None]:
    """The facts to check the bundle against, from the run's own row, or why there are
    none."""
    if row is None:
        return "the run is gone", None
    if row["state"] != "succeeded" or row["attempt"] != params.attempt:
        found = f"the run is {row['state']} at attempt {row['attempt']}"
        return f"{found}, not succeeded at attempt {params.attempt}", None
    try:
        grant = parse_repository_grant(row["repository_grant"])
    except GrantValidationError:
        return "the run has no valid repository grant", None
    result = normalize_result(row["result"])
    transaction = result.get("repository_transaction")
    transaction = transaction if isinstance(transaction, dict) else {}
    head_after = git_object_id(result.get("head_after"))
    baseline = git_object_id(transaction.get("baseline_digest"))
    if head_after is None or baseline is None:
        return "the run's evidence names no head_after and baseline", None
    accepted = transaction.get("accepted_commits")
    commits = tuple(str(c) for c in accepted) if isinstance(accepted, list) and accepted else None
    return None, PublishFacts(
        run_id=params.run_id,
        attempt=params.attempt,
        baseline=baseline,
        head_after=head_after,
        grant=grant,
        accepted_commits=commits,
    )
