"""`POST /ops-runs/{id}/publish`: an operator asks for a run's changes to be published.

In one transaction, under the run's row lock (so two requests for one run are
serialized): the run must be succeeded with its current attempt's changes stored; then

- a `published` publication answers as it is (nothing starts, audited `repeated`);
- a `pending` one answers as it is too (its workflow is running; `repeated`);
- none, or a `failed` one: the row becomes `pending` (who, when), the audit entry is
  written as the intent, and PublishChangesWorkflow is started, all before COMMIT, as a
  manual fire does (temporal/request_start.py): a failed write means nothing started (503, ask
  again); a failed start rolls the row and the entry back. Once the workflow started,
  the answer is `pending` whatever the COMMIT does: a lost COMMIT is logged, never
  answered 503 "retry" (the workflow writes its row itself, an upsert, so the run still
  shows its publication).

A `pending` row whose workflow is closed in Temporal without having recorded a result
(terminated by an operator of Temporal, timed out, failed before its last word) would
stay pending for ever. It is reconciled here, on the next POST publish, under the same
locks: the workflow is described; closed and not completed, the row becomes `failed`
with `workflow_terminated` (or `workflow_timed_out`, `workflow_failed`,
`workflow_cancelled`, `workflow_missing` once Temporal no longer knows it), the audit
entry says so (`reconciled`), and the request goes on as after a failure. Here rather
than on reads or in a sweep: a read (GET run, the change view, the UI) must not depend
on Temporal being reachable, and a sweep would describe every pending workflow on a
timer; the publish request is the one act that needs the answer, and it already talks
to Temporal.

The workflow id is one per run (`publish-changes:<run>`), started with
ALLOW_DUPLICATE_FAILED_ONLY: Temporal refuses a second start while one runs (a request
can never start two pushes at once, whatever the database says) and after one that
completed (a completed PublishChangesWorkflow is a published run: it is never pushed
again), and allows it after one that failed (the workflow fails exactly when the
publication failed), which is what "failed → publish again" needs.
"""

from __future__ import annotations

import functools
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from activity_core.publication import queries
from activity_core.publication.payloads import (
    PUBLISH_WORKFLOW_NAME,
    PublishChangesInput,
    PublishChangesResult,
    publication_workflow_id,
)
from activity_core.publication.record import project_publication
from activity_core.publication.remote_git import changes_ref
from activity_core.queue.errors import QueueRefusal
from activity_core.temporal.audit_entry import ActionAudit
from activity_core.temporal.client import TemporalClientProvider
from activity_core.temporal.request_start import (
    describe_workflow,
    start_then_commit,
    start_workflow,
)
from ops_contracts import RefusalCode

__all__ = ["PublicationAnswer", "request_publication"]

log = logging.getLogger("activity_core.temporal.publication")


@dataclass(frozen=True)
class PublicationAnswer:
    run_id: uuid.UUID
    publication: dict[str, Any]
    started: bool  # this request started the workflow (202), else a repeat (200)


async def request_publication(
    pool: asyncpg.Pool,
    temporal: TemporalClientProvider,
    *,
    run_id: uuid.UUID,
    requested_by: str,
    task_queue: str,
    audit: ActionAudit,
) -> PublicationAnswer:
    """Raises QueueRefusal (not_found, state_conflict), DatabaseUnavailable or
    TemporalUnavailable (nothing started)."""
    lost_commit = functools.partial(_lost_commit, run_id)
    async with start_then_commit(pool, lost_commit=lost_commit) as (conn, started):
        run = await conn.fetchrow(queries.PUBLISH_SOURCE, run_id)
        if run is None:
            raise QueueRefusal(RefusalCode.not_found, "no ops run with this id")
        if run["state"] != "succeeded":
            raise QueueRefusal(
                RefusalCode.state_conflict,
                f"the run is {run['state']}; only a succeeded run's changes are published",
            )
        if run["digest"] is None:
            raise QueueRefusal(
                RefusalCode.state_conflict,
                f"the run has no stored changes for its attempt {run['attempt']}",
            )
        earlier = await conn.fetchrow(queries.LOCK_PUBLICATION, run_id)
        workflow_id = publication_workflow_id(str(run_id))
        reconciled: str | None = None
        if earlier is not None and earlier["state"] == "pending":
            reconciled = await _ended_without_result(temporal, workflow_id)
            if reconciled is not None:
                earlier = await conn.fetchrow(
                    queries.MARK_WORKFLOW_ENDED, run_id, workflow_id, reconciled
                )
                log.warning(
                    "publication of run %s was pending on a closed workflow: %s",
                    run_id,
                    reconciled,
                    extra={"run_id": str(run_id), "workflow_id": workflow_id},
                )
        if earlier is not None and earlier["state"] in ("published", "pending"):
            await audit.write(
                conn, {"state": earlier["state"], "workflow_id": workflow_id}, repeated=True
            )
            shown = project_publication(dict(earlier))
            assert shown is not None
            return PublicationAnswer(run_id, shown, started=False)
        ref = changes_ref(str(run_id), run["attempt"])
        row = await conn.fetchrow(
            queries.REQUEST_PENDING, run_id, run["attempt"], ref, requested_by, workflow_id
        )
        assert row is not None  # an upsert always returns its row
        details: dict[str, Any] = {"workflow_id": workflow_id, "ref": ref}
        if earlier is not None:
            details["after_failure"] = True
        if reconciled is not None:
            details["reconciled"] = reconciled
        await audit.write(conn, details)
        params = PublishChangesInput(
            run_id=str(run_id),
            attempt=run["attempt"],
            requested_by=requested_by,
            requested_at=row["requested_at"].isoformat(),
        )
        await _start(temporal, params, workflow_id=workflow_id, task_queue=task_queue)
        shown = project_publication(dict(row))
        assert shown is not None
        started.answer = PublicationAnswer(run_id, shown, started=True)
    assert started.answer is not None
    return started.answer


def _lost_commit(run_id: uuid.UUID, started: PublicationAnswer, exc: Exception) -> None:
    log.error(
        "publication of run %s started, but its request did not commit: %s",
        run_id,
        type(exc).__name__,
        extra={"run_id": str(run_id), "workflow_id": publication_workflow_id(str(run_id))},
    )


_ENDED = {
    WorkflowExecutionStatus.TERMINATED: "workflow_terminated",
    WorkflowExecutionStatus.TIMED_OUT: "workflow_timed_out",
    WorkflowExecutionStatus.FAILED: "workflow_failed",
    WorkflowExecutionStatus.CANCELED: "workflow_cancelled",
}


async def _ended_without_result(temporal: TemporalClientProvider, workflow_id: str) -> str | None:
    """Why a pending publication's workflow can no longer record a result, or None while
    it runs (or completed: it recorded `published` itself)."""
    described = await describe_workflow(temporal, workflow_id, refused="the lookup")
    if described is None:
        return "workflow_missing"
    return _ENDED.get(described.status) if described.status is not None else None


async def _start(
    temporal: TemporalClientProvider,
    params: PublishChangesInput,
    *,
    workflow_id: str,
    task_queue: str,
) -> None:
    try:
        await start_workflow(
            temporal,
            PUBLISH_WORKFLOW_NAME,
            params,
            workflow_id=workflow_id,
            task_queue=task_queue,
            result_type=PublishChangesResult,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
        )
    except WorkflowAlreadyStartedError:
        # the database said failed (or had no row) while Temporal has a publication that
        # runs or completed: it knows better; nothing changes here
        raise QueueRefusal(
            RefusalCode.state_conflict,
            "a publication of this run is running or has completed in Temporal; "
            "its state shows once it has recorded it",
        ) from None
