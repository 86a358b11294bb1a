"""The outbox's delivery callback: send one entry's close to Activity Core.

It sends exactly the stored intent (the normalized result, the sanitized error, the
reopen decision, as the original worker identity) so a repeat after a lost response is
the exact normalized repeat Activity Core reconciles, with the claim attempt the close
was decided under (fencing; none for a record that never knew it). It does nothing
else: no model, approach or repository operation is reachable from here.
`on_response`, when given, is told the queue's answer (the worker uses it to emit
completion events once the pass is over); it must not raise.

A close refused `terminal_conflict` because an operator cancelled the run meanwhile
(`CloseRefusedError.cancelled_by_operator`) is an expected end, not a close gone wrong:
the entry is settled as `cancelled` (kept in delivered/, never quarantined) and
`on_cancelled`, when given, is told (the worker withdraws the run's landing branch).
"""

from __future__ import annotations

from collections.abc import Callable

from ops_contracts import CloseAction, CloseResponse
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import CloseRefusedError
from rein_aharness.outbox.record import CANCELLED, OutboxRecord, Settlement
from rein_aharness.outbox.replay import DeliveryCallback

__all__ = ["deliver_close", "send_close"]


async def send_close(client: ActivityCoreQueueClient, record: OutboxRecord) -> CloseResponse:
    intent = record.intent
    if intent.action is CloseAction.complete:
        assert intent.result is not None  # CloseIntent requires it to complete
        return await client.complete(
            record.run_id, intent.worker_id, intent.result, attempt=record.attempt
        )
    assert intent.error is not None  # CloseIntent requires it to fail
    return await client.fail(
        record.run_id,
        intent.worker_id,
        intent.error,
        reopen=intent.reopen,
        result=intent.result,
        attempt=record.attempt,
    )


def deliver_close(
    client: ActivityCoreQueueClient,
    on_response: Callable[[OutboxRecord, CloseResponse], None] | None = None,
    on_cancelled: Callable[[OutboxRecord], None] | None = None,
) -> DeliveryCallback:
    async def deliver(record: OutboxRecord) -> Settlement:
        try:
            response = await send_close(client, record)
        except CloseRefusedError as refusal:
            if not refusal.cancelled_by_operator:
                raise
            if on_cancelled is not None:
                on_cancelled(record)
            return CANCELLED
        if on_response is not None:
            on_response(record, response)
        return response.close_disposition

    return deliver
