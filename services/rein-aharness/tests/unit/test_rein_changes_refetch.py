"""A remote Glas run's lost bundle, fetched again on replay (repository/changes_store.py),
each answer of Glas recorded with respx; the whole pass against a real activity-core is
in tests/integration/test_rein_worker_glas_changes.py."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from rein_aharness.adapters.glas_changes import GlasChangesClient, GlasChangesUnavailable
from rein_aharness.adapters.retry import RetryPolicy
from rein_aharness.outbox import EntryUndeliverable, OutboxRecord, OutboxStore
from rein_aharness.repository.changes_store import ChangesStore

BASE = "http://glas.test"
RUN = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
PATH = f"/v1/requests/{RUN}.2/changes.bundle"
BUNDLE = b"# v2 git bundle\n-" + b"a" * 40 + b"\n\nPACK"
DIGEST = "sha256:" + hashlib.sha256(BUNDLE).hexdigest()


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(base_url=BASE, assert_all_called=False)


@pytest.fixture
async def changes(router: respx.MockRouter, tmp_path: Path) -> AsyncIterator[ChangesStore]:
    async with GlasChangesClient(
        BASE,
        max_bytes=1024,
        transport=httpx.MockTransport(router.async_handler),
        retry=RetryPolicy(attempts=2, initial_wait=0, max_wait=0),
    ) as glas:
        yield ChangesStore(tmp_path / "changes", repositories_root=None, glas=glas)


def _record(store: OutboxStore, make_close: Callable[..., dict[str, Any]]) -> OutboxRecord:
    result = {
        "ok": True,
        "head_after": "b" * 40,
        "committed": True,
        "repository_transaction": {
            "transaction_id": f"rtx-{RUN}.2",
            "baseline_digest": "a" * 40,
            "changes_digest": DIGEST,
            "acceptance": "accepted",
            "accepted_commits": ["b" * 40],
            "accepted_paths": ["briefs/x.md"],
        },
    }
    record: OutboxRecord = store.enqueue_close(
        **make_close(run_id=RUN, transaction_id=f"rtx-{RUN}.2", result=result, attempt=2)
    ).record
    return record


async def test_the_kept_file_is_used_and_a_lost_one_fetched_again_and_kept(
    router: respx.MockRouter,
    changes: ChangesStore,
    store: OutboxStore,
    make_close: Callable[..., dict[str, Any]],
) -> None:
    route = router.get(PATH).mock(return_value=httpx.Response(200, content=BUNDLE))
    record = _record(store, make_close)
    kept = changes.keep(BUNDLE)
    assert await changes.bundle_for(record, DIGEST) == BUNDLE
    assert route.call_count == 0  # the file was there

    kept.path.unlink()
    assert await changes.bundle_for(record, DIGEST) == BUNDLE
    assert route.call_count == 1  # by the attempt's request id
    assert kept.path.read_bytes() == BUNDLE  # kept again for the next round


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (httpx.Response(200, content=BUNDLE + b"x"), "changes_digest_mismatch"),
        (httpx.Response(404, json={"code": "not_found"}), "changes_unavailable"),
        (httpx.Response(200, content=b"x" * 1025), "changes_unavailable"),
    ],
)
async def test_a_bundle_glas_cannot_give_again_is_undeliverable(
    router: respx.MockRouter,
    changes: ChangesStore,
    store: OutboxStore,
    make_close: Callable[..., dict[str, Any]],
    answer: httpx.Response,
    reason: str,
) -> None:
    router.get(PATH).mock(return_value=answer)
    record = _record(store, make_close)
    with pytest.raises(EntryUndeliverable) as undeliverable:
        await changes.bundle_for(record, DIGEST)
    assert undeliverable.value.reason == reason
    assert not changes.directory.exists() or list(changes.directory.iterdir()) == []


async def test_glas_away_keeps_the_entry_pending(
    router: respx.MockRouter,
    changes: ChangesStore,
    store: OutboxStore,
    make_close: Callable[..., dict[str, Any]],
) -> None:
    router.get(PATH).mock(side_effect=[httpx.Response(503), httpx.ConnectError("x")])
    with pytest.raises(GlasChangesUnavailable):  # an ordinary failure: the entry stays
        await changes.bundle_for(_record(store, make_close), DIGEST)
