"""A remote Glas's granted completion joins the local path's hand-over (docs/changes.md).

The commits of a run done by a remote Glas are in Glas's repository, not the worker's,
so the worker fetches their changes bundle from Glas (adapters/glas_changes.py), checks
it against the result (repository/changes_check.py), keeps it durably in
`<state>/changes/` (repository/changes_store.py) and returns the result with the
bundle's digest as `repository_transaction.changes_digest`. From there the close is the
local path's: the intent carries the digest, delivery uploads the bundle before the
complete, a lost file is fetched again (idempotent by the request id).

A bundle is wanted for an `ok` result of a granted request (a grant's commit_count.min
is at least 1, so such a result has commits; activity-core takes its complete only with
stored changes). What can go wrong, and what the run's close becomes:

| what happened                                  | error (reason starts with)        |
| ---------------------------------------------- | --------------------------------- |
| the result names no baseline, head_after or    | WorkRejected `changes_invalid:`   |
| accepted commits                               |                                   |
| Glas refuses the GET (404, 403, 3xx ...)       | WorkRejected `changes_unavailable:` |
| the bundle is over REIN_AHARNESS_CHANGES_MAX_BYTES | WorkRejected `changes_too_large:` |
| the bytes are not the result's bundle          | WorkRejected `changes_invalid:`   |
| Glas unreachable, 408/429/5xx after retries    | GatewayUnavailable (reopened)     |
| the bundle cannot be kept (disk)               | WorkRejected (as the local path)  |

WorkRejected fails the run (not reopened: another attempt would be another request with
its own work), carrying the result turned rejected: no commits, head or path, so nothing
links to work that was not handed over.
"""

from __future__ import annotations

import hashlib
import logging

import anyio

from ops_contracts import GatewayResult
from rein_aharness.adapters.glas_changes import (
    GlasChangesClient,
    GlasChangesRefused,
    GlasChangesTooLarge,
    GlasChangesUnavailable,
)
from rein_aharness.gateway.errors import GatewayUnavailable, WorkRejected
from rein_aharness.gateway.request import QueuedRequest
from rein_aharness.repository.changes_check import ChangesInvalid, check_changes_bundle
from rein_aharness.repository.changes_store import ChangesStore

__all__ = ["hand_over_remote_changes", "rejected_result", "wants_changes"]

log = logging.getLogger(__name__)


def wants_changes(request: QueuedRequest, result: GatewayResult) -> bool:
    return result.ok and request.grant is not None


def rejected_result(result: GatewayResult) -> GatewayResult:
    """`result` as evidence of work that was not accepted (the local path's shape)."""
    transaction = result.repository_transaction
    return result.model_copy(
        update={
            "ok": False,
            "path": None,
            "head_after": None,
            "committed": False,
            "evidence": result.evidence.model_copy(
                update={
                    "outcome": "refused",
                    "head_after": None,
                    "commit_refs": None,
                    "artifact_refs": None,
                }
            ),
            "repository_transaction": (
                transaction.model_copy(
                    update={
                        "acceptance": "rejected",
                        "accepted_commits": [],
                        "accepted_paths": [],
                        "changes_digest": None,
                    }
                )
                if transaction is not None
                else None
            ),
        }
    )


async def hand_over_remote_changes(
    request: QueuedRequest,
    result: GatewayResult,
    *,
    client: GlasChangesClient,
    store: ChangesStore,
) -> GatewayResult:
    """`result` with its changes digest, the bundle kept; or the table's errors."""
    grant = request.grant
    assert grant is not None  # wants_changes
    transaction = result.repository_transaction

    def reject(reason: str) -> WorkRejected:
        return WorkRejected(reason, result=rejected_result(result))

    if (
        transaction is None
        or transaction.baseline_digest is None
        or result.head_after is None
        or not transaction.accepted_commits
    ):
        raise reject(
            "changes_invalid: glas's granted completion names no baseline_digest, "
            "head_after or accepted_commits"
        )
    extra = {"run_id": request.run_id, "request_id": request.request_id}
    try:
        data = await client.fetch(request.request_id)
    except GlasChangesUnavailable as exc:
        raise GatewayUnavailable(f"glas changes bundle: {exc}") from None
    except GlasChangesTooLarge as exc:
        raise reject(f"changes_too_large: {exc}") from None
    except GlasChangesRefused as exc:
        raise reject(f"changes_unavailable: {exc}") from None
    try:
        await check_changes_bundle(
            data,
            run_id=request.run_id,
            attempt=request.run.attempt,
            baseline=transaction.baseline_digest,
            head_after=result.head_after,
            commits=transaction.accepted_commits,
            grant=grant,
        )
    except ChangesInvalid as exc:
        log.warning("glas's changes bundle refused: %s", exc.reason, extra=extra)
        raise reject(f"changes_invalid: glas's changes bundle: {exc.reason}") from None
    named = transaction.changes_digest
    if named is not None and named != "sha256:" + hashlib.sha256(data).hexdigest():
        raise reject("changes_invalid: glas's result names another changes_digest than its bundle")
    try:
        bundle = await anyio.to_thread.run_sync(store.keep, data)
    except OSError as exc:
        raise reject(f"keeping the changes bundle failed: {type(exc).__name__}") from None
    log.info(
        "changes bundle fetched from glas",
        extra={**extra, "digest": bundle.digest, "size": bundle.size},
    )
    return result.model_copy(
        update={
            "repository_transaction": transaction.model_copy(
                update={"changes_digest": bundle.digest}
            )
        }
    )
