"""The upload of a run's changes bundle (PUT /ops-runs/{id}/changes): fenced, checked,
stored once.

In order, and why:

1. the digest the worker names (X-Changes-Digest) must be the body's: the close's
   evidence will name it, so a body that is not what the worker meant is refused first;
2. a first fenced look, in a short transaction under the run's row lock
   (queries.LOCK_RUN_FOR_CLOSE, as a close takes it), with the attempt's stored row:
   decide_upload refuses what a complete would refuse, answers a repeat of the stored
   digest without running git, and refuses another digest (changes_conflict);
3. the bundle is verified against the run's queued grant (changes/verify.py), outside
   any transaction: git takes up to seconds and no row lock is held that long. A git
   call that runs out of time (ACTIVITY_CORE_CHANGES_GIT_TIMEOUT_SECONDS) or a scratch
   directory the node cannot make is our failure, not the bundle's: 503 `unavailable`
   (the worker retries it), nothing stored, never the conclusive `changes_invalid`;
4. stored in a second transaction, again under the run's lock, fenced again (the lease
   may have ended, or another upload may have stored the attempt's row, while git ran),
   with INSERT ... ON CONFLICT DO NOTHING: a row exists only for an attempt that held
   the lease in the very transaction that stored it.

Both transactions are Unit.TRANSACTION: repeated only when the connection was lost
before COMMIT (db/unavailable.py), and the insert is idempotent anyway.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.changes import queries as changes_queries
from activity_core.changes.bundle_format import ChangesInvalid
from activity_core.changes.verify import (
    DEFAULT_TIMEOUT_S,
    ChangesCheckUnavailable,
    VerifiedChanges,
    bundle_digest,
    verify_bundle,
)
from activity_core.db.unavailable import Unit, run_unit
from activity_core.queue import queries
from activity_core.queue.changes_decision import AlreadyStored, StoreChanges, decide_upload
from activity_core.queue.close import refusal
from activity_core.queue.close_decision import Refuse
from activity_core.queue.errors import QueueRefusal
from activity_core.queue.metrics import QueueMetrics
from ops_contracts import GrantValidationError, RefusalCode, parse_repository_grant

__all__ = ["ChangesUploads", "stored_changes_answer"]

log = logging.getLogger("activity_core.queue")


def stored_changes_answer(row: asyncpg.Record | dict[str, Any]) -> dict[str, Any]:
    """The upload's answer body: the stored row's facts, never the bundle."""
    return {
        "run_id": str(row["run_id"]),
        "attempt": int(row["attempt"]),
        "digest": row["digest"],
        "size": int(row["size"]),
        "baseline": row["baseline"],
        "head_after": row["head_after"],
        "commits": list(row["commits"]),
        "paths": list(row["paths"]),
    }


class ChangesUploads:
    def __init__(
        self, pool: asyncpg.Pool, *, metrics: QueueMetrics, git_timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self._pool = pool
        self._metrics = metrics
        self._git_timeout_s = git_timeout_s

    async def upload(
        self,
        run_id: uuid.UUID,
        worker_id: str,
        attempt: int,
        bundle: bytes,
        *,
        claimed_digest: str,
    ) -> tuple[dict[str, Any], bool]:
        """(the stored row's answer, whether this call stored it)."""
        digest = bundle_digest(bundle)
        if claimed_digest != digest:
            raise self._refused(
                Refuse(
                    RefusalCode.changes_invalid,
                    f"X-Changes-Digest is {claimed_digest[:80]!r}, the body's digest is {digest}",
                ),
                run_id,
                worker_id,
            )

        async def look(conn: PoolConnectionProxy[asyncpg.Record]) -> Any:
            row = await conn.fetchrow(queries.LOCK_RUN_FOR_CLOSE, run_id)
            stored = await conn.fetchrow(changes_queries.GET_CHANGES_FACTS, run_id, attempt)
            return row, stored

        row, stored = await run_unit(self._pool, Unit.TRANSACTION, look, untouched=True)
        decision = decide_upload(
            row,
            worker_id,
            attempt,
            digest=digest,
            stored_digest=None if stored is None else stored["digest"],
        )
        if isinstance(decision, Refuse):
            raise self._refused(decision, run_id, worker_id)
        if isinstance(decision, AlreadyStored):
            return self._answered(stored, run_id, worker_id, created=False)
        assert row is not None
        verified = await self._verify(bundle, run_id, worker_id, attempt, row["repository_grant"])

        async def store(conn: PoolConnectionProxy[asyncpg.Record]) -> Any:
            locked = await conn.fetchrow(queries.LOCK_RUN_FOR_CLOSE, run_id)
            present = await conn.fetchrow(changes_queries.GET_CHANGES_FACTS, run_id, attempt)
            again = decide_upload(
                locked,
                worker_id,
                attempt,
                digest=digest,
                stored_digest=None if present is None else present["digest"],
            )
            if isinstance(again, Refuse):
                return again
            if isinstance(again, AlreadyStored):
                return present, False
            assert isinstance(again, StoreChanges)
            inserted = await conn.fetchrow(
                changes_queries.INSERT_IF_ABSENT,
                run_id,
                attempt,
                verified.digest,
                verified.size,
                verified.baseline,
                verified.head_after,
                list(verified.commits),
                list(verified.paths),
                bundle,
            )
            # the row lock serializes uploads of one run, so the insert cannot conflict
            assert inserted is not None
            return inserted, True

        outcome = await run_unit(self._pool, Unit.TRANSACTION, store, untouched=True)
        if isinstance(outcome, Refuse):
            raise self._refused(outcome, run_id, worker_id)
        stored_row, created = outcome
        return self._answered(stored_row, run_id, worker_id, created=created)

    async def _verify(
        self,
        bundle: bytes,
        run_id: uuid.UUID,
        worker_id: str,
        attempt: int,
        queued_grant: Any,
    ) -> VerifiedChanges:
        try:
            grant = parse_repository_grant(dict(queued_grant))
        except GrantValidationError:
            # a stored grant that no longer validates authorizes nothing (as a close)
            raise self._refused(
                Refuse(RefusalCode.changes_invalid, "the queued repository grant is not valid"),
                run_id,
                worker_id,
            ) from None
        try:
            return await verify_bundle(
                bundle,
                run_id=str(run_id),
                attempt=attempt,
                grant=grant,
                timeout_s=self._git_timeout_s,
            )
        except ChangesInvalid as exc:
            raise self._refused(
                Refuse(RefusalCode.changes_invalid, exc.reason), run_id, worker_id
            ) from exc
        except (ChangesCheckUnavailable, OSError) as exc:
            log.warning(
                "changes check unavailable: %s",
                exc if isinstance(exc, ChangesCheckUnavailable) else type(exc).__name__,
                extra={"run_id": str(run_id), "worker_id": worker_id},
            )
            raise QueueRefusal(
                RefusalCode.unavailable,
                "the changes could not be checked on this node in time; retry",
            ) from exc

    def _refused(self, refused: Refuse, run_id: uuid.UUID, worker_id: str) -> QueueRefusal:
        return refusal(refused, run_id, worker_id, "changes upload")

    def _answered(
        self, row: Any, run_id: uuid.UUID, worker_id: str, *, created: bool
    ) -> tuple[dict[str, Any], bool]:
        outcome = "stored" if created else "repeated"
        self._metrics.changes_uploads.labels(outcome=outcome).inc()
        log.info(
            "changes %s",
            outcome,
            extra={
                "run_id": str(run_id),
                "worker_id": worker_id,
                "attempt": int(row["attempt"]),
                "digest": row["digest"],
                "size": int(row["size"]),
            },
        )
        return stored_changes_answer(row), created
