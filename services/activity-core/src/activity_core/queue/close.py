"""A close: complete or fail a claimed run, exactly once, fenced by its attempt.

The common close (the closer holds an active lease, at the attempt it names, on a run
queued without a repository grant) is one conditional UPDATE, shared with the common
closes that arrive together (queries.CLOSE_LEASED_UNGRANTED / CLOSE_MANY_LEASED_UNGRANTED,
queue/coalesce.py); no row back means "not that case" and nothing changed. Every other
close is one short transaction that locks its row (LOCK_RUN_FOR_CLOSE) and applies what
the pure close_decision.decide_close answers: a refusal, the reconciliation of a repeated
close, grant evidence, a reopen, or the terminal close itself.

The common close is an autocommit statement, so once sent it is never repeated here; the
locking close is one transaction, repeated only when the connection was lost before
COMMIT (db/unavailable.py). A worker's own repeat meets the repeat rules instead: an
exact repeat of a recorded terminal close reconciles.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from activity_core.changes import queries as changes_queries
from activity_core.db.pool import EncodedJson
from activity_core.db.unavailable import Unit, run_unit
from activity_core.queue import queries
from activity_core.queue.close_decision import (
    ApplyTerminal,
    CloseRequest,
    Reconcile,
    Refuse,
    ReopenRun,
    decide_close,
    terminal_state_without_row,
)
from activity_core.queue.coalesce import Coalescer
from activity_core.queue.errors import QueueRefusal
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.projection import project
from ops_contracts import (
    PARSED_STRICT_JSON,
    CloseAction,
    CloseDisposition,
    CloseIntent,
    RunState,
    close_intent_encoding,
)
from ops_evidence import normalize_result, sanitize_error

__all__ = ["COMMON_CLOSE", "Closer", "Closes", "refusal"]

log = logging.getLogger("activity_core.queue")

T = TypeVar("T")

# Every common close has the same statement, so they share one coalescing key.
COMMON_CLOSE = "leased-ungranted"


class Closer(NamedTuple):
    """What a common close brings to a shared statement."""

    run_id: uuid.UUID
    state: RunState  # the terminal state it reaches
    request: CloseRequest


def _stored_result(request: CloseRequest) -> Any:
    """The result parameter of a close statement: the text the intent's digest already
    encoded, which the jsonb codec then sends as it is, else the value itself."""
    if request.result_json is not None:
        return EncodedJson(request.result_json)
    return request.result


def refusal(refused: Refuse, run_id: uuid.UUID, worker_id: str, action: str) -> QueueRefusal:
    """The refusal of a close or a heartbeat, logged once with its machine code."""
    log.info(
        "%s refused: %s",
        action,
        refused.code.value,
        extra={"run_id": str(run_id), "worker_id": worker_id, "code": refused.code.value},
    )
    return QueueRefusal(refused.code, refused.detail)


def _intent(**fields: Any) -> CloseIntent:
    # A close's raw result is a request body's, which a request model or the strict
    # parser proved finite JSON, and normalizing only picks and cuts it: the intent need
    # not encode it once more to prove it digestible (the digest encodes it).
    return CloseIntent.model_validate(fields, context=PARSED_STRICT_JSON)


class Closes:
    def __init__(
        self, pool: asyncpg.Pool, *, max_attempts: int, metrics: QueueMetrics, coalesce_max: int
    ) -> None:
        self._pool = pool
        self._max_attempts = max_attempts
        self._metrics = metrics
        self._together: Coalescer[str, Closer, asyncpg.Record | None] = Coalescer(
            self._close_together, max_items=lambda _: coalesce_max
        )

    async def complete(
        self,
        run_id: uuid.UUID,
        worker_id: str,
        raw_result: dict[str, Any],
        *,
        attempt: int | None = None,
    ) -> tuple[dict[str, Any], CloseDisposition]:
        result = normalize_result(raw_result)
        intent = _intent(
            action=CloseAction.complete,
            worker_id=worker_id,
            result=result,
            error=None,
            reopen=False,
        )
        return await self._close(run_id, intent, attempt)

    async def fail(
        self,
        run_id: uuid.UUID,
        worker_id: str,
        error: str,
        *,
        reopen: bool,
        raw_result: dict[str, Any] | None,
        attempt: int | None = None,
    ) -> tuple[dict[str, Any], CloseDisposition]:
        result = None if raw_result is None else normalize_result(raw_result)
        intent = _intent(
            action=CloseAction.fail,
            worker_id=worker_id,
            result=result,
            error=sanitize_error(error),
            reopen=reopen,
        )
        return await self._close(run_id, intent, attempt)

    async def _close(
        self, run_id: uuid.UUID, intent: CloseIntent, attempt: int | None
    ) -> tuple[dict[str, Any], CloseDisposition]:
        # The attempt fences the close to one claim of the run; it is not part of the
        # intent, so a repeat of a recorded close reconciles whichever attempt it names.
        digest, result_json = close_intent_encoding(intent)
        request = CloseRequest(
            action=intent.action,
            worker_id=intent.worker_id,
            result=intent.result,
            error=intent.error,
            reopen=intent.reopen,
            intent_digest=digest,
            attempt=attempt,
            result_json=None if result_json is None else result_json.decode("utf-8"),
        )
        started = time.perf_counter()
        state = terminal_state_without_row(request)
        updated: Any = None
        if state is not None:
            updated = await self._together.submit(COMMON_CLOSE, Closer(run_id, state, request))
        disposition = CloseDisposition.applied
        if updated is None:
            updated, disposition = await self._run(
                Unit.TRANSACTION, lambda conn: self._close_locked(conn, run_id, request)
            )
        self._metrics.close_latency.observe(time.perf_counter() - started)
        self._metrics.count_close(intent.action.value, disposition.value)
        log.info(
            "run %s %s",
            intent.action.value,
            disposition.value,
            extra={
                "run_id": str(run_id),
                "worker_id": intent.worker_id,
                "disposition": disposition.value,
            },
        )
        # an applied close stored the request's normalized result and error
        return project(updated, normalized=disposition is CloseDisposition.applied), disposition

    async def _close_together(self, key: str, closers: list[Closer]) -> list[asyncpg.Record | None]:
        """Common closes that arrived together in one statement: each closer's row, or None
        where its run was not in that case (or was already in this statement)."""
        first: dict[uuid.UUID, int] = {}
        for n, closer in enumerate(closers):
            first.setdefault(closer.run_id, n)
        unique = [closers[n] for n in first.values()]
        self._metrics.coalesced_closes.observe(len(unique))
        if len(unique) == 1:
            one = unique[0]
            row = await self._run(
                Unit.STATEMENTS,
                lambda conn: conn.fetchrow(
                    queries.CLOSE_LEASED_UNGRANTED,
                    one.run_id,
                    one.request.worker_id,
                    one.state.value,
                    _stored_result(one.request),
                    one.request.error,
                    one.request.intent_digest,
                    one.request.attempt,
                ),
            )
            rows = [] if row is None else [row]
        else:
            rows = await self._run(
                Unit.STATEMENTS,
                lambda conn: conn.fetch(
                    queries.CLOSE_MANY_LEASED_UNGRANTED,
                    [c.run_id for c in unique],
                    [c.request.worker_id for c in unique],
                    [c.state.value for c in unique],
                    [_stored_result(c.request) for c in unique],
                    [c.request.error for c in unique],
                    [c.request.intent_digest for c in unique],
                    [c.request.attempt for c in unique],
                ),
            )
        by_run = {row["id"]: row for row in rows}
        return [
            by_run.get(closer.run_id) if first[closer.run_id] == n else None
            for n, closer in enumerate(closers)
        ]

    async def _close_locked(
        self, conn: PoolConnectionProxy[asyncpg.Record], run_id: uuid.UUID, request: CloseRequest
    ) -> tuple[Any, CloseDisposition]:
        """Every close, inside its transaction: lock the row, let decide_close answer,
        apply what it decided."""
        row = await conn.fetchrow(queries.LOCK_RUN_FOR_CLOSE, run_id)
        stored_changes = None
        if (
            row is not None
            and request.action is CloseAction.complete
            and row["repository_grant"] is not None
            and row["state"] == RunState.claimed
        ):
            # the changes of the attempt this close is fenced on, read under the run's
            # lock: an upload stores them under the same lock (queue/changes_upload.py)
            stored_changes = await conn.fetchrow(
                changes_queries.GET_CHANGES_FACTS, run_id, row["attempt"]
            )
        decision = decide_close(
            row, request, max_attempts=self._max_attempts, stored_changes=stored_changes
        )
        if isinstance(decision, Refuse):
            raise refusal(decision, run_id, request.worker_id, request.action.value)
        assert row is not None
        if isinstance(decision, Reconcile):
            if row["state"] == RunState.succeeded:
                return row, CloseDisposition.reconciled
            # a failed or expired run may have been requeued since its close
            successors = await conn.fetchval(queries.REQUEUED_AS, run_id)
            return {**dict(row), "requeued_as": successors}, CloseDisposition.reconciled
        if isinstance(decision, ReopenRun):
            reopened = await conn.fetchrow(
                queries.REOPEN_AFTER_FAILURE, run_id, _stored_result(request), request.error
            )
            return reopened, CloseDisposition.reopened
        assert isinstance(decision, ApplyTerminal)
        applied = await conn.fetchrow(
            queries.CLOSE_TERMINAL,
            run_id,
            decision.state.value,
            _stored_result(request),
            request.error,
            request.intent_digest,
        )
        return applied, CloseDisposition.applied

    async def _run(
        self, unit: Unit, work: Callable[[PoolConnectionProxy[asyncpg.Record]], Awaitable[T]]
    ) -> T:
        # Close statements set no session state (queries.py): the release may skip the
        # session reset query, a round trip per close.
        return await run_unit(self._pool, unit, work, untouched=True)
