"""The outbox's delivery callback: send one entry's close to Activity Core.

It sends exactly the stored intent (the normalized result, the sanitized error, the
reopen decision, as the original worker identity) so a repeat after a lost response is
the exact normalized repeat Activity Core reconciles. It does nothing else: no model,
approach or repository operation is reachable from here.
"""

from __future__ import annotations

from ops_contracts import CloseAction, CloseDisposition
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.outbox.record import OutboxRecord
from rein_aharness.outbox.replay import DeliveryCallback

__all__ = ["deliver_close"]


def deliver_close(client: ActivityCoreQueueClient) -> DeliveryCallback:
    async def deliver(record: OutboxRecord) -> CloseDisposition:
        intent = record.intent
        if intent.action is CloseAction.complete:
            assert intent.result is not None  # CloseIntent requires it to complete
            response = await client.complete(record.run_id, intent.worker_id, intent.result)
        else:
            assert intent.error is not None  # CloseIntent requires it to fail
            response = await client.fail(
                record.run_id,
                intent.worker_id,
                intent.error,
                reopen=intent.reopen,
                result=intent.result,
            )
        return response.close_disposition

    return deliver
