"""Close delivery with changes (docs/changes.md): the upload before the close, and how
each answer is settled; activity-core's answers recorded with respx, as the queue client's
other tests do (the real activity-core runs in tests/integration/test_rein_worker_changes.py)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx

from ops_contracts import REFUSAL_HTTP_STATUS, RefusalCode
from ops_testsupport.factories import run_projection
from rein_aharness.adapters.close_delivery import UPLOAD_ROUNDS, deliver_close
from rein_aharness.adapters.queue_client import ActivityCoreQueueClient
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.outbox import EntryUndeliverable, OutboxRecord, OutboxStore, replay_pending

BASE = "http://activity-core.test"
RUN = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
FAST = RetryPolicy(attempts=2, initial_wait=0, max_wait=0)
BUNDLE = b"# v2 git bundle\n-" + b"a" * 40 + b"\n\nPACK"
DIGEST = "sha256:" + hashlib.sha256(BUNDLE).hexdigest()


class Bundles:
    def __init__(self, lost: str | None = None) -> None:
        self.asked: list[str] = []
        self.lost = lost

    async def bundle_for(self, record: OutboxRecord, digest: str) -> bytes:
        self.asked.append(digest)
        if self.lost is not None:
            raise EntryUndeliverable(self.lost)
        return BUNDLE


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(base_url=BASE, assert_all_called=False)


@pytest.fixture
async def client(router: respx.MockRouter) -> AsyncIterator[ActivityCoreQueueClient]:
    async with ActivityCoreQueueClient(
        BASE, "s3cret-token", transport=httpx.MockTransport(router.async_handler), retry=FAST
    ) as queue:
        yield queue


def _refusal(code: str) -> httpx.Response:
    return httpx.Response(
        REFUSAL_HTTP_STATUS[RefusalCode(code)], json={"code": code, "detail": "x"}
    )


def _stored(status: int = 201, digest: str = DIGEST, attempt: int = 1) -> httpx.Response:
    return httpx.Response(
        status,
        json={
            "run_id": RUN,
            "attempt": attempt,
            "digest": digest,
            "size": len(BUNDLE),
            "commits": [],
        },
    )


def _closed(disposition: str) -> httpx.Response:
    return httpx.Response(
        200, json={**run_projection(state="succeeded"), "close_disposition": disposition}
    )


# Per attempt of RUN, the commit its close accepted (with changes, DIGEST), the target
# repository and the accepted path.
_ACCEPTED = {1: ("b" * 40, "research/briefs", "briefs/x.md"), 2: ("c" * 40, "r/x", "a")}

Enqueue = Callable[..., str]


@pytest.fixture
def enqueue(store: OutboxStore, make_close: Callable[..., dict[str, Any]]) -> Enqueue:
    """`enqueue(attempt=1)` puts the complete of RUN's attempt, with changes, in the
    outbox: its key."""

    def enqueue_attempt(attempt: int = 1) -> str:
        head, target_repo, path = _ACCEPTED[attempt]
        result = {
            "ok": True,
            "target_repo": target_repo,
            "head_after": head,
            "committed": True,
            "repository_transaction": {
                "transaction_id": f"rtx-{RUN}.{attempt}",
                "baseline_digest": "a" * 40,
                "changes_digest": DIGEST,
                "acceptance": "accepted",
                "accepted_commits": [head],
                "accepted_paths": [path],
            },
        }
        close = make_close(
            run_id=RUN, transaction_id=f"rtx-{RUN}.{attempt}", result=result, attempt=attempt
        )
        return store.enqueue_close(**close).record.key

    return enqueue_attempt


async def test_the_bundle_is_uploaded_before_the_close(
    router: respx.MockRouter, client: ActivityCoreQueueClient, store: OutboxStore, enqueue: Enqueue
) -> None:
    put = router.put(f"/ops-runs/{RUN}/changes").mock(return_value=_stored())
    complete = router.post(f"/ops-runs/{RUN}/complete").mock(return_value=_closed("applied"))
    enqueue()
    uploads: list[str] = []
    report = await replay_pending(
        store, deliver_close(client, changes=Bundles(), on_upload=uploads.append)
    )
    assert [o.detail for o in report.outcomes] == ["applied"]
    assert [c.request.url.path.rsplit("/", 1)[-1] for c in router.calls] == ["changes", "complete"]
    request = put.calls.last.request
    assert request.content == BUNDLE
    assert request.headers["content-type"] == "application/x-git-bundle"
    assert request.headers["x-changes-digest"] == DIGEST
    assert dict(request.url.params) == {"worker_id": "rein-aharness@railiance01", "attempt": "1"}
    assert uploads == ["stored"]
    assert complete.call_count == 1


async def test_changes_not_stored_uploads_again_and_then_stays_pending(
    router: respx.MockRouter, client: ActivityCoreQueueClient, store: OutboxStore, enqueue: Enqueue
) -> None:
    put = router.put(f"/ops-runs/{RUN}/changes").mock(return_value=_stored(200))
    complete = router.post(f"/ops-runs/{RUN}/complete").mock(
        side_effect=[
            _refusal("changes_not_stored"),
            _closed("applied"),
        ]
    )
    enqueue()
    report = await replay_pending(store, deliver_close(client, changes=Bundles()))
    assert [o.detail for o in report.outcomes] == ["applied"]
    assert put.call_count == 2 and complete.call_count == 2

    complete.mock(side_effect=None, return_value=_refusal("changes_not_stored"))
    put.reset()
    put.mock(return_value=_stored(200, attempt=2))
    key = enqueue(attempt=2)
    report = await replay_pending(store, deliver_close(client, changes=Bundles()))
    assert [(o.outcome, o.detail) for o in report.outcomes] == [("failed", "ChangesNotStoredError")]
    assert put.call_count == UPLOAD_ROUNDS
    assert (store.paths.pending / f"{key}.json").exists()


@pytest.mark.parametrize("code", ["changes_invalid", "changes_conflict", "changes_too_large"])
async def test_a_conclusive_upload_refusal_quarantines_without_a_close(
    router: respx.MockRouter,
    client: ActivityCoreQueueClient,
    store: OutboxStore,
    enqueue: Enqueue,
    code: str,
) -> None:
    router.put(f"/ops-runs/{RUN}/changes").mock(return_value=_refusal(code))
    complete = router.post(f"/ops-runs/{RUN}/complete")
    enqueue()
    report = await replay_pending(store, deliver_close(client, changes=Bundles()))
    assert [(o.outcome, o.detail) for o in report.outcomes] == [("quarantined", code)]
    assert complete.call_count == 0
    [entry] = store.snapshot().quarantined
    assert entry.code == code


async def test_a_fenced_upload_lets_the_close_settle_the_entry(
    router: respx.MockRouter, client: ActivityCoreQueueClient, store: OutboxStore, enqueue: Enqueue
) -> None:
    """The close was taken, its answer lost: the run is succeeded, so the upload is refused
    (terminal_conflict), and the close's exact repeat is reconciled."""
    router.put(f"/ops-runs/{RUN}/changes").mock(return_value=_refusal("terminal_conflict"))
    router.post(f"/ops-runs/{RUN}/complete").mock(return_value=_closed("reconciled"))
    enqueue()
    report = await replay_pending(store, deliver_close(client, changes=Bundles()))
    assert [o.detail for o in report.outcomes] == ["reconciled"]


async def test_an_expired_upload_and_close_quarantine_with_the_close_code(
    router: respx.MockRouter, client: ActivityCoreQueueClient, store: OutboxStore, enqueue: Enqueue
) -> None:
    router.put(f"/ops-runs/{RUN}/changes").mock(return_value=_refusal("expired_lease"))
    router.post(f"/ops-runs/{RUN}/complete").mock(return_value=_refusal("expired_lease"))
    enqueue()
    report = await replay_pending(store, deliver_close(client, changes=Bundles()))
    assert [(o.outcome, o.detail) for o in report.outcomes] == [("quarantined", "expired_lease")]


async def test_lost_changes_quarantine_the_entry_with_the_reason(
    router: respx.MockRouter, client: ActivityCoreQueueClient, store: OutboxStore, enqueue: Enqueue
) -> None:
    put = router.put(f"/ops-runs/{RUN}/changes")
    enqueue()
    report = await replay_pending(
        store, deliver_close(client, changes=Bundles(lost="changes_digest_mismatch"))
    )
    assert [(o.outcome, o.detail) for o in report.outcomes] == [
        ("quarantined", "changes_digest_mismatch")
    ]
    assert put.call_count == 0
    [entry] = store.snapshot().quarantined
    assert entry.reason == "changes_digest_mismatch"


async def test_an_answer_for_other_changes_is_a_protocol_error_and_stays_pending(
    router: respx.MockRouter, client: ActivityCoreQueueClient, store: OutboxStore, enqueue: Enqueue
) -> None:
    router.put(f"/ops-runs/{RUN}/changes").mock(return_value=_stored(digest="sha256:" + "f" * 64))
    complete = router.post(f"/ops-runs/{RUN}/complete")
    enqueue()
    report = await replay_pending(store, deliver_close(client, changes=Bundles()))
    assert [(o.outcome, o.detail) for o in report.outcomes] == [("failed", "QueueProtocolError")]
    assert complete.call_count == 0


async def test_a_405_on_the_upload_never_closes_without_the_changes(
    router: respx.MockRouter, client: ActivityCoreQueueClient, store: OutboxStore, enqueue: Enqueue
) -> None:
    """There is no "older activity-core" fallback: a 405 is an unclassified refusal
    (queue_errors.QueueRejectedError), so the entry stays pending and no complete is
    sent without the changes it names."""
    put = router.put(f"/ops-runs/{RUN}/changes").mock(
        return_value=httpx.Response(
            405, json={"code": "method_not_allowed", "detail": "no such method"}
        )
    )
    complete = router.post(f"/ops-runs/{RUN}/complete")
    key = enqueue()
    report = await replay_pending(store, deliver_close(client, changes=Bundles()))
    assert [(o.outcome, o.detail) for o in report.outcomes] == [("failed", "QueueRejectedError")]
    assert put.call_count == 1  # not retried: it is not transient
    assert complete.call_count == 0
    assert (store.paths.pending / f"{key}.json").exists()
    assert store.snapshot().quarantined == ()
