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

Changes first (docs/changes.md). A complete whose result names a `changes_digest` is
sent only after its bundle was uploaded (`PUT /ops-runs/{id}/changes`, 200 or 201): the
bytes come from `changes` (the file, or written again from the landed branch; when that
cannot give the recorded digest it raises EntryUndeliverable and the entry is
quarantined). Then:

- the close answered 409 `changes_not_stored` (the stored row is gone, or the upload
  raced a reopen): upload again and close again, at most UPLOAD_ROUNDS times, then the
  entry stays pending (ChangesNotStoredError, not conclusive);
- the upload refused `changes_invalid`, `changes_conflict` or `changes_too_large`: the
  same bytes are refused again, the entry is quarantined with that code;
- the upload refused with a fencing code (`expired_lease`, `wrong_owner`, `not_found`,
  `state_conflict`, `terminal_conflict`): the run is no longer this attempt's to upload
  to, so the close is sent anyway and its own answer settles the entry as it always
  does (an exact repeat of a close already taken is reconciled; a cancelled run is
  settled; anything else quarantined). A close answered `changes_not_stored` then is
  quarantined with the upload's code.
- any other refusal of the upload (a 405, a 404 page of a proxy, `invalid_request`):
  unclassified (queue_errors.QueueRejectedError), so the entry stays pending and no
  close is sent: a complete is never sent without the changes it names.

`on_upload`, when given, is told how each upload ended (`stored`, `already_stored`,
`refused`), for the metrics; it must not raise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from ops_contracts import CONCLUSIVE_CLOSE_REFUSALS, CloseAction, CloseResponse, RefusalCode
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.queue_errors import (
    ChangesRefusedError,
    CloseRefusedError,
    QueueRejectedError,
)
from rein_aharness.outbox.record import CANCELLED, OutboxRecord, Settlement
from rein_aharness.outbox.replay import DeliveryCallback

__all__ = [
    "UPLOAD_ROUNDS",
    "ChangesNotStoredError",
    "ChangesSource",
    "changes_digest_of",
    "deliver_close",
    "send_close",
]

log = logging.getLogger(__name__)

UPLOAD_ROUNDS = 3


class ChangesSource(Protocol):
    async def bundle_for(self, record: OutboxRecord, digest: str) -> bytes:
        """The bundle bytes with `digest`; EntryUndeliverable when they are lost."""
        ...


class ChangesNotStoredError(Exception):
    """The close was still answered `changes_not_stored` after UPLOAD_ROUNDS uploads;
    the entry stays pending for the next pass."""


def changes_digest_of(record: OutboxRecord) -> str | None:
    """The `changes_digest` of a complete intent's repository transaction, or None."""
    if record.intent.action is not CloseAction.complete:
        return None
    result = record.intent.result
    transaction = result.get("repository_transaction") if isinstance(result, dict) else None
    digest = transaction.get("changes_digest") if isinstance(transaction, dict) else None
    return digest if isinstance(digest, str) else None


def _changes_not_stored(exc: QueueRejectedError) -> bool:
    return exc.status == 409 and exc.code == RefusalCode.changes_not_stored.value


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


async def _upload(
    client: ActivityCoreQueueClient,
    changes: ChangesSource,
    record: OutboxRecord,
    digest: str,
    on_upload: Callable[[str], None] | None,
) -> None:
    bundle = await changes.bundle_for(record, digest)
    assert record.attempt is not None  # a granted complete always knows its attempt
    try:
        status, _ = await client.put_changes(
            record.run_id, record.intent.worker_id, bundle, digest, attempt=record.attempt
        )
    except ChangesRefusedError as refusal:
        log.warning(
            "changes upload refused",
            extra={"run_id": record.run_id, "code": refusal.code.value, "digest": digest},
        )
        if on_upload is not None:
            on_upload("refused")
        raise
    result = "stored" if status == 201 else "already_stored"
    log.info(
        "changes uploaded",
        extra={"run_id": record.run_id, "digest": digest, "size": len(bundle), "result": result},
    )
    if on_upload is not None:
        on_upload(result)


async def send_with_changes(
    client: ActivityCoreQueueClient,
    changes: ChangesSource,
    record: OutboxRecord,
    digest: str,
    on_upload: Callable[[str], None] | None = None,
) -> CloseResponse:
    """Upload the bundle, then send the close (see the module docstring)."""
    for _ in range(UPLOAD_ROUNDS):
        try:
            await _upload(client, changes, record, digest, on_upload)
        except ChangesRefusedError as refusal:
            if refusal.code not in CONCLUSIVE_CLOSE_REFUSALS:
                raise
            try:
                return await send_close(client, record)
            except QueueRejectedError as exc:
                if _changes_not_stored(exc):
                    raise refusal from None
                raise
        try:
            return await send_close(client, record)
        except QueueRejectedError as exc:
            if not _changes_not_stored(exc):
                raise
            log.warning(
                "close answered changes_not_stored: uploading again",
                extra={"run_id": record.run_id, "digest": digest},
            )
    raise ChangesNotStoredError(f"still changes_not_stored after {UPLOAD_ROUNDS} uploads")


def deliver_close(
    client: ActivityCoreQueueClient,
    on_response: Callable[[OutboxRecord, CloseResponse], None] | None = None,
    on_cancelled: Callable[[OutboxRecord], None] | None = None,
    *,
    changes: ChangesSource | None = None,
    on_upload: Callable[[str], None] | None = None,
) -> DeliveryCallback:
    """`changes`: where bundles come from (the worker always has one); without one a
    close naming a changes digest is sent as it is, and activity-core answers
    `changes_not_stored` (it stays pending)."""

    async def deliver(record: OutboxRecord) -> Settlement:
        digest = changes_digest_of(record)
        try:
            if digest is not None and changes is not None:
                response = await send_with_changes(client, changes, record, digest, on_upload)
            else:
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
