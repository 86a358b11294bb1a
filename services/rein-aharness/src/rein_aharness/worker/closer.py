"""Deliver closes: through the durable outbox, or directly for legacy rows.

Outboxed close (every profiled or refused run): the intent is enqueued (durable: fsync,
atomic replace) and then delivered by a replay pass, the same pass that runs before
every claim. Replay sends close requests only; it cannot repeat repository work.

Every close carries the claim attempt it was decided under (the entry stores it; the
direct close takes the claimed run's), so Activity Core refuses it with `expired_lease`
once that attempt is no longer current, even when this same identity holds a later one.

The worker's replay sends only the entries recorded under its own identity. An entry
recorded under another one (its id changed while the entry was pending) can never be
delivered by this worker: it is quarantined (`foreign_worker_identity`), visible to
`close-outbox status`, and the worker goes on claiming. A close refused because an
operator cancelled the run meanwhile (`terminal_conflict`, its detail saying so) is the
run's expected end, not a close gone wrong: the entry is settled as `cancelled` (kept in
delivered/, so `close-outbox status` stays ready), counted and logged, and the run's
landing branch `rein/<run-id>/<attempt>` is withdrawn (`withdraw_landing`), since the
run will never be closed as succeeded. An auth refusal (401/403) of one
of its own entries is its credentials, refused for every request: the pass stops and
nothing is claimed until they work (loop.py).

Direct close (legacy, profile-absent rows only, as the outbox document says): one
complete/fail request, with the queue client's bounded retries for transport errors.
If it still fails, nothing is recorded: the lease expires and the run is claimed again.
Legacy approaches are read-only, so running one again changes nothing.

After a completion is accepted (`applied`, or `reconciled` after a lost response) the
domain completion event is emitted (events.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread

from ops_contracts import CloseAction, CloseDisposition, CloseResponse, OpsRun
from ops_evidence import sanitize_error
from rein_aharness.adapters.close_delivery import changes_digest_of, deliver_close
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import (
    CloseRefusedError,
    QueueAuthError,
    QueueError,
    QueueTransientError,
)
from rein_aharness.gateway import WithdrawLanding
from rein_aharness.outbox import (
    InvalidCloseIntentError,
    OutboxConflictError,
    OutboxRecord,
    OutboxStore,
    PreparedClose,
    QuarantineReason,
    ReplayReport,
    prepare_close,
    replay_pending,
)
from rein_aharness.repository.changes_store import ChangesStore
from rein_aharness.worker.decisions import CloseDecision, refusal
from rein_aharness.worker.events import EventSink, completion_event

__all__ = ["CloseReport", "Closer"]

log = logging.getLogger(__name__)

# Dispositions after which the completion event is emitted.
_ANNOUNCED = frozenset({CloseDisposition.applied, CloseDisposition.reconciled})


@dataclass(frozen=True)
class CloseReport:
    """How one run's close ended up: `delivered` (with its disposition), `cancelled`
    (refused: an operator had cancelled the run; settled), `pending` (stays in the outbox
    for the next replay), `quarantined`, or `lost` (direct close that did not get
    through)."""

    run_id: str
    path: str  # "outbox" or "direct"
    state: str
    disposition: CloseDisposition | None = None
    detail: str | None = None


class Closer:
    def __init__(
        self,
        *,
        client: ActivityCoreQueueClient,
        store: OutboxStore,
        events: EventSink,
        worker_id: str,
        withdraw_landing: WithdrawLanding | None = None,
        changes: ChangesStore | None = None,
        on_upload: Callable[[str], None] | None = None,
    ) -> None:
        self._changes = changes
        self._on_upload = on_upload
        self._client = client
        self._store = store
        self._events = events
        self._worker_id = worker_id
        self._withdraw = withdraw_landing

    # -- replay ------------------------------------------------------------------------

    async def replay(self) -> ReplayReport:
        """Deliver every pending close, oldest first; then emit the completion events.

        A transport outage or an auth failure ends the pass (`stopped_early`): every
        later entry would meet it too. Entries recorded under another worker identity
        are quarantined without a request.
        """
        answered: list[tuple[OutboxRecord, CloseResponse]] = []
        cancelled: list[OutboxRecord] = []

        def remember(record: OutboxRecord, response: CloseResponse) -> None:
            answered.append((record, response))

        report = await replay_pending(
            self._store,
            deliver_close(
                self._client,
                remember,
                cancelled.append,
                changes=self._changes,
                on_upload=self._on_upload,
            ),
            stop_on=(QueueTransientError, QueueAuthError),
            identity=self._worker_id,
            quarantine_foreign=True,
        )
        delivered = {o.key for o in report.outcomes if o.outcome == "delivered"}
        settled = {o.key for o in report.outcomes if o.outcome == "cancelled"}
        self._discard_bundles(
            [r for r, _ in answered if r.key in delivered]
            + [r for r in cancelled if r.key in settled]
        )
        for record, response in answered:
            if record.key in delivered and record.intent.action is CloseAction.complete:
                await self._announce(response)
        for record in cancelled:
            if record.key in settled:
                await self._withdraw_cancelled(record)
        for outcome in report.outcomes:
            if outcome.outcome == "cancelled":
                log.info(
                    "close settled: an operator cancelled the run before its close arrived",
                    extra={"run_id": outcome.run_id, "key": outcome.key},
                )
            elif outcome.detail == QuarantineReason.foreign_worker_identity:
                log.warning(
                    "close quarantined: recorded under another worker identity, which "
                    "this worker (ACTIVITY_CORE_WORKER_ID) cannot deliver",
                    extra={"run_id": outcome.run_id, "key": outcome.key},
                )
            elif outcome.outcome != "delivered":
                log.warning(
                    "close not delivered",
                    extra={
                        "run_id": outcome.run_id,
                        "outcome": outcome.outcome,
                        "detail": outcome.detail,
                    },
                )
        return report

    def _discard_bundles(self, records: list[OutboxRecord]) -> None:
        """Remove the changes bundles of closes now delivered (their entries are in
        delivered/ for good: the pass committed them)."""
        if self._changes is None:
            return
        for record in records:
            digest = changes_digest_of(record)
            if digest is None:
                continue
            try:
                self._changes.discard(digest)
            except OSError as exc:  # the next start's prune removes it
                log.warning("changes bundle not removed: %s", type(exc).__name__)
                continue
            log.info(
                "changes bundle removed: its close is delivered",
                extra={"run_id": record.run_id, "digest": digest},
            )

    async def _withdraw_cancelled(self, record: OutboxRecord) -> None:
        result = record.intent.result or {}
        target_repo = result.get("target_repo")
        if self._withdraw is None or record.attempt is None or not isinstance(target_repo, str):
            return
        await self._withdraw(target_repo, record.run_id, record.attempt)

    # -- outboxed close ----------------------------------------------------------------

    async def close_through_outbox(
        self, run: OpsRun, transaction_id: str, decision: CloseDecision
    ) -> CloseReport:
        run_id = str(run.id)
        prepared = self._prepare(run_id, run.attempt, transaction_id, decision)
        try:
            enqueued = await anyio.to_thread.run_sync(self._store.enqueue, prepared)
        except OutboxConflictError as exc:
            # The attempt's entry already holds another intent; that one is delivered.
            log.error("close not enqueued: %s", exc, extra={"run_id": run_id})
            return CloseReport(run_id, "outbox", "conflict", detail=",".join(exc.fields))
        report = await self.replay()
        for outcome in report.outcomes:
            if outcome.key == prepared.key:
                disposition = (
                    CloseDisposition(outcome.detail)
                    if outcome.outcome == "delivered" and outcome.detail
                    else None
                )
                state = outcome.outcome if outcome.outcome != "failed" else "pending"
                return CloseReport(run_id, "outbox", state, disposition, outcome.detail)
        # Not reached by this pass (an outage stopped it earlier): still pending.
        return CloseReport(run_id, "outbox", enqueued.state)

    def _prepare(
        self, run_id: str, attempt: int, transaction_id: str, decision: CloseDecision
    ) -> PreparedClose:
        try:
            return prepare_close(
                run_id=run_id,
                transaction_id=transaction_id,
                worker_id=self._worker_id,
                action=decision.action,
                result=decision.result,
                error=decision.error,
                reopen=decision.reopen,
                attempt=attempt,
            )
        except InvalidCloseIntentError as exc:
            # Cannot happen for a normalized GatewayResult; if it does, fail the run
            # rather than leave it claimed, and say why.
            log.error(
                "close intent refused by the outbox bounds: %s", exc, extra={"run_id": run_id}
            )
            fallback = refusal("the run's close evidence exceeded the outbox bounds")
            return prepare_close(
                run_id=run_id,
                transaction_id=transaction_id,
                worker_id=self._worker_id,
                action=fallback.action,
                result=None,
                error=fallback.error,
                reopen=False,
                attempt=attempt,
            )

    # -- direct close ------------------------------------------------------------------

    async def close_directly(self, run: OpsRun, decision: CloseDecision) -> CloseReport:
        run_id = str(run.id)
        try:
            if decision.action is CloseAction.complete:
                assert decision.result is not None
                response = await self._client.complete(
                    run_id, self._worker_id, decision.result, attempt=run.attempt
                )
            else:
                assert decision.error is not None
                response = await self._client.fail(
                    run_id,
                    self._worker_id,
                    sanitize_error(decision.error),
                    reopen=decision.reopen,
                    result=decision.result,
                    attempt=run.attempt,
                )
        except CloseRefusedError as exc:
            log.warning("direct close refused", extra={"run_id": run_id, "code": exc.code.value})
            return CloseReport(run_id, "direct", "refused", detail=exc.code.value)
        except QueueError as exc:
            log.warning(
                "direct close not delivered; the lease will expire",
                extra={"run_id": run_id, "error": type(exc).__name__},
            )
            return CloseReport(run_id, "direct", "lost", detail=type(exc).__name__)
        if decision.action is CloseAction.complete and response.close_disposition in _ANNOUNCED:
            await self._announce(response)
        return CloseReport(run_id, "direct", "delivered", response.close_disposition)

    async def _announce(self, response: CloseResponse) -> None:
        if response.close_disposition not in _ANNOUNCED:
            return
        try:
            await self._events.emit(completion_event(response))
        except Exception as exc:  # a sink must not raise, but a close never depends on it
            log.warning("completion event not emitted: %s", type(exc).__name__)
