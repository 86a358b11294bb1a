"""Durability and replay, sentence by sentence of close-evidence-outbox.md."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from ops_contracts import (
    CONCLUSIVE_CHANGES_REFUSALS,
    CONCLUSIVE_CLOSE_REFUSALS,
    CloseDisposition,
    RefusalCode,
    canonical_json,
)
from rein_aharness.adapters.queue_errors import (
    QueueAuthError,
    QueueRejectedError,
    QueueTransportError,
    QueueUnavailableError,
)
from rein_aharness.outbox import (
    FAILURE_MARKER,
    ConclusiveRefusalError,
    OutboxStore,
    replay_pending,
)
from rein_aharness.outbox.record import OutboxRecord

Factory = Callable[..., dict[str, Any]]
RUN = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"  # make_close's run id


def _files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def _record_on_disk(store: OutboxStore, key: str, state: str = "pending") -> dict[str, Any]:
    directory = store.paths.pending if state == "pending" else store.paths.delivered
    value = json.loads((directory / f"{key}.json").read_bytes())
    assert isinstance(value, dict)
    return value


class Recorder:
    """A delivery callback that records what it saw and answers as told."""

    def __init__(self, store: OutboxStore, answer: object = CloseDisposition.applied) -> None:
        self.store = store
        self.answer = answer
        self.calls: list[OutboxRecord] = []
        self.attempts_on_disk: list[int] = []

    async def __call__(self, record: OutboxRecord) -> CloseDisposition | None:
        self.calls.append(record)
        # The attempt must already be durable when the callback begins.
        self.attempts_on_disk.append(_record_on_disk(self.store, record.key)["attempts"])
        if isinstance(self.answer, BaseException):
            raise self.answer
        assert self.answer is None or isinstance(self.answer, CloseDisposition)
        return self.answer


def _replay(store: OutboxStore, deliver: Any, **kwargs: Any) -> Any:
    return anyio.run(lambda: replay_pending(store, deliver, **kwargs))


def _replay_sending_nothing(store: OutboxStore) -> Any:
    """A replay pass that must call the delivery callback for no entry: its report."""
    recorder = Recorder(store)
    report = _replay(store, recorder)
    assert recorder.calls == []
    return report


def _sidecar(store: OutboxStore, key: str) -> Any:
    """The reason sidecar that quarantine wrote beside entry `key`."""
    return json.loads((store.paths.quarantine / f"{key}.reason.json").read_bytes())


# -- "The retry attempt is durable before the delivery callback begins." -----------------


def test_attempt_is_durable_before_the_callback_begins(
    store: OutboxStore, make_close: Factory
) -> None:
    store.enqueue_close(**make_close())
    recorder = Recorder(store, RuntimeError("later"))
    _replay(store, recorder)
    _replay(store, recorder)
    assert recorder.attempts_on_disk == [1, 2]
    assert recorder.calls[1].attempts == 2


# -- "Normal callback return ... marks the entry delivered and atomically moves it" -------


@pytest.mark.parametrize(
    "disposition",
    [CloseDisposition.applied, CloseDisposition.reconciled, CloseDisposition.reopened, None],
)
def test_normal_return_moves_the_entry_to_delivered(
    store: OutboxStore, make_close: Factory, disposition: CloseDisposition | None
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    report = _replay(store, Recorder(store, disposition))
    assert report.count("delivered") == 1
    assert _files(store.paths.pending) == []
    assert _files(store.paths.delivered) == [f"{key}.json"]
    delivered = _record_on_disk(store, key, "delivered")
    assert delivered["state"] == "delivered"
    assert delivered["delivered_at"] == "2026-01-01T12:00:00Z"
    assert delivered["disposition"] == (disposition.value if disposition else None)
    assert delivered["attempts"] == 1


def test_a_delivered_entry_is_not_delivered_again(store: OutboxStore, make_close: Factory) -> None:
    store.enqueue_close(**make_close())
    recorder = Recorder(store)
    _replay(store, recorder)
    _replay(store, recorder)
    assert len(recorder.calls) == 1


def test_an_interrupted_move_is_finished_without_calling_the_callback_again(
    store: OutboxStore, make_close: Factory
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    pending_copy = (store.paths.pending / f"{key}.json").read_bytes()
    _replay(store, Recorder(store))
    # A crash after the delivered/ commit but before the pending/ unlink leaves both.
    (store.paths.pending / f"{key}.json").write_bytes(pending_copy)
    assert store.snapshot().pending == ()
    _replay_sending_nothing(store)
    assert _files(store.paths.pending) == []
    assert _files(store.paths.quarantine) == []


# -- "An ordinary exception retains it in pending/ with only the exception class and a ----
#    generic failure marker; exception text is not persisted."


SECRET = "Bearer sk-live-SECRET at https://user:pw@activity-core.internal/ops-runs"


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(SECRET),
        ValueError(SECRET),
        QueueTransportError(SECRET),
        QueueUnavailableError(SECRET, status=503),
        QueueRejectedError(SECRET, status=422, code="invalid_request"),
        QueueAuthError(SECRET, status=401, code="unauthenticated"),
        ExceptionGroup("group", [RuntimeError(SECRET)]),
    ],
)
def test_ordinary_exception_keeps_pending_with_class_and_marker_only(
    store: OutboxStore, make_close: Factory, error: Exception
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    report = _replay(store, Recorder(store, error))
    assert report.count("failed") == 1
    record = _record_on_disk(store, key)
    assert record["state"] == "pending"
    assert record["attempts"] == 1
    assert record["last_failure"] == {
        "exception_class": type(error).__name__,
        "marker": FAILURE_MARKER,
    }
    for path in store.paths.root.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert b"SECRET" not in content and b"user:pw" not in content, path
    assert _files(store.paths.quarantine) == []


def test_a_later_success_after_failures_is_delivered_with_all_attempts(
    store: OutboxStore, make_close: Factory
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    _replay(store, Recorder(store, QueueTransportError("down")))
    _replay(store, Recorder(store, QueueUnavailableError("down", status=503)))
    _replay(store, Recorder(store, CloseDisposition.reconciled))
    delivered = _record_on_disk(store, key, "delivered")
    assert delivered["attempts"] == 3
    assert delivered["disposition"] == "reconciled"


# -- "Process interrupts propagate; the already-recorded attempt remains pending." -------


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(3)])
def test_process_interrupts_propagate_with_the_attempt_recorded(
    store: OutboxStore, make_close: Factory, interrupt: BaseException
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    store.enqueue_close(**make_close(run_id="second"))
    recorder = Recorder(store, interrupt)
    with pytest.raises(type(interrupt)):
        _replay(store, recorder)
    assert len(recorder.calls) == 1  # the pass stopped at once
    record = _record_on_disk(store, key)
    assert record["attempts"] == 1
    assert record["last_failure"] is None
    assert len(_files(store.paths.pending)) == 2


async def test_cancellation_propagates_with_the_attempt_recorded(
    store: OutboxStore, make_close: Factory
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    started = anyio.Event()

    async def hang(record: OutboxRecord) -> CloseDisposition:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.move_on_after(5) as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(replay_pending, store, hang)
            await started.wait()
            group.cancel_scope.cancel()
    assert not scope.cancelled_caught
    record = _record_on_disk(store, key)
    assert record["attempts"] == 1 and record["state"] == "pending"


async def test_a_cancelled_error_raised_by_the_callback_is_not_a_delivery_failure(
    store: OutboxStore, make_close: Factory
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    with pytest.raises(asyncio.CancelledError):
        await replay_pending(store, Recorder(store, asyncio.CancelledError()))
    assert _record_on_disk(store, key)["last_failure"] is None


# -- "Activity Core refusal codes ... are conclusive ... Such entries move to quarantine" --


@pytest.mark.parametrize("code", sorted(CONCLUSIVE_CLOSE_REFUSALS))
def test_each_conclusive_refusal_quarantines_intact_with_a_reason_sidecar(
    store: OutboxStore, make_close: Factory, code: RefusalCode
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    _replay(store, Recorder(store, ConclusiveRefusalError(code)))
    attempted = (store.paths.quarantine / f"{key}.json").read_bytes()
    record = json.loads(attempted)
    assert record["attempts"] == 1 and record["state"] == "pending"  # moved intact
    assert _files(store.paths.pending) == []
    sidecar_path = store.paths.quarantine / f"{key}.reason.json"
    sidecar = json.loads(sidecar_path.read_bytes())
    assert sidecar["reason"] == "conclusive_refusal"
    assert sidecar["code"] == code.value
    assert sidecar["run_id"] == record["run_id"]
    assert sidecar["source"] == "pending"
    assert len(sidecar_path.read_bytes()) < 2048  # bounded
    # ... rather than retrying forever: later passes never call the callback for it.
    _replay_sending_nothing(store)
    assert (store.paths.quarantine / f"{key}.json").read_bytes() == attempted


@pytest.mark.parametrize(
    "code",
    sorted(set(RefusalCode) - CONCLUSIVE_CHANGES_REFUSALS),
)
def test_only_conclusive_codes_make_a_close_refusal(code: RefusalCode) -> None:
    # the conclusive close codes and a changes upload's (changes_invalid, ...);
    # changes_not_stored is not: the worker uploads and closes again
    with pytest.raises(ValueError, match="not a conclusive"):
        ConclusiveRefusalError(code)


def test_a_refusal_whose_code_was_tampered_with_stays_pending(
    store: OutboxStore, make_close: Factory
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    refusal = ConclusiveRefusalError(RefusalCode.not_found)
    refusal.code = RefusalCode.unauthenticated
    _replay(store, Recorder(store, refusal))
    assert (
        _record_on_disk(store, key)["last_failure"]["exception_class"] == "ConclusiveRefusalError"
    )


# -- "An unclassified HTTP failure or transport outage remains pending." -----------------


@pytest.mark.parametrize(
    "error",
    [
        QueueTransportError("connect failed"),
        QueueUnavailableError("503", status=503),
        QueueRejectedError("418", status=418),
        QueueRejectedError("404 without a code", status=404),
    ],
)
def test_unclassified_http_failures_and_outages_remain_pending(
    store: OutboxStore, make_close: Factory, error: Exception
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    for _ in range(3):
        _replay(store, Recorder(store, error))
    record = _record_on_disk(store, key)
    assert record["attempts"] == 3 and record["state"] == "pending"
    assert _files(store.paths.quarantine) == []


def test_stop_on_ends_the_pass_after_an_outage(store: OutboxStore, make_close: Factory) -> None:
    for index in range(3):
        store.enqueue_close(**make_close(run_id=f"run-{index}"))
    recorder = Recorder(store, QueueTransportError("down"))
    report = _replay(store, recorder, stop_on=(QueueTransportError,))
    assert report.stopped_early and len(recorder.calls) == 1
    attempts = sorted(
        json.loads(path.read_bytes())["attempts"] for path in store.paths.pending.iterdir()
    )
    assert attempts == [0, 0, 1]


# -- ordering and limits -------------------------------------------------------------------


def test_entries_are_delivered_oldest_first_and_limit_bounds_a_pass(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    for name in ("c-oldest", "a-middle", "b-newest"):
        store.enqueue_close(**make_close(run_id=name))
        clock.advance(seconds=1)
    recorder = Recorder(store)
    report = _replay(store, recorder, limit=2)
    assert [record.run_id for record in recorder.calls] == ["c-oldest", "a-middle"]
    assert report.count("delivered") == 2
    assert [entry.run_id for entry in store.snapshot().pending] == ["b-newest"]


def test_replay_calls_only_the_close_callback(
    store: OutboxStore, make_close: Factory, make_fail: Factory
) -> None:
    store.enqueue_close(**make_close(run_id="done"))
    store.enqueue_close(**make_fail(run_id="failed", reopen=True))
    recorder = Recorder(store)
    _replay(store, recorder)
    # What the callback gets is the stored close intent and nothing executable.
    assert {record.intent.action.value for record in recorder.calls} == {"complete", "fail"}
    for record in recorder.calls:
        assert set(OutboxRecord.model_fields) >= set(record.model_dump())


def test_the_outbox_package_imports_no_gateway_approach_or_repository_code() -> None:
    source = Path(__file__).parents[2] / "src" / "rein_aharness" / "outbox"
    for module in source.glob("*.py"):
        text = module.read_text()
        for line in text.splitlines():
            if line.startswith(("import ", "from ")) and "rein_aharness" in line:
                assert line.split()[1].startswith("rein_aharness.outbox"), (module, line)
        assert "subprocess" not in text


# -- Quarantine of invalid, oversized and mismatched records ------------------------------


def _valid_record_bytes(store: OutboxStore, make_close: Factory, **overrides: Any) -> bytes:
    key = store.enqueue_close(**make_close(**overrides)).record.key
    path = store.paths.pending / f"{key}.json"
    data = path.read_bytes()
    path.unlink()
    return data


def _corrupt(data: bytes, **changes: Any) -> bytes:
    value = json.loads(data)
    for dotted, new in changes.items():
        target = value
        *parents, leaf = dotted.split("__")
        for parent in parents:
            target = target[parent]
        target[leaf] = new
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


CORRUPTIONS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated": (lambda data: data[: len(data) // 2], "unparsable"),
    "empty": (lambda data: b"", "unparsable"),
    "binary": (lambda data: b"\xff\xfe\x00", "unparsable"),
    "nan": (lambda data: data.replace(b'"attempts":0', b'"attempts":NaN'), "unparsable"),
    "duplicate key": (lambda data: data[:-1] + b',"attempts":0}', "unparsable"),
    "not an object": (lambda data: b"[1,2,3]", "invalid_record"),
    "unknown field": (lambda data: _corrupt(data, prompt="secret"), "invalid_record"),
    "wrong format": (lambda data: _corrupt(data, format="v2"), "invalid_record"),
    "negative attempts": (lambda data: _corrupt(data, attempts=-1), "invalid_record"),
    "string attempts": (lambda data: _corrupt(data, attempts="1"), "invalid_record"),
    "zero attempt": (lambda data: _corrupt(data, attempt=0), "invalid_record"),
    "boolean attempt": (lambda data: _corrupt(data, attempt=True), "invalid_record"),
    "v1 with an attempt": (
        lambda data: _corrupt(data, format="rein-aharness/close-outbox-entry/v1", attempt=3),
        "invalid_record",
    ),
    "pretty printed": (
        lambda data: json.dumps(json.loads(data), indent=2).encode(),
        "not_canonical",
    ),
    "state says delivered": (
        lambda data: _corrupt(data, state="delivered", delivered_at="2026-01-01T12:00:00Z"),
        "state_mismatch",
    ),
    "delivered_at in pending": (
        lambda data: _corrupt(data, delivered_at="2026-01-01T12:00:00Z"),
        "state_mismatch",
    ),
    "key field differs": (lambda data: _corrupt(data, key="0" * 64), "key_mismatch"),
    "run id differs": (lambda data: _corrupt(data, run_id="another-run"), "key_mismatch"),
    "digest differs": (
        lambda data: _corrupt(data, intent_digest="ci1-" + "0" * 64),
        "intent_digest_mismatch",
    ),
    "worker swapped": (
        lambda data: _corrupt(data, intent__worker_id="intruder@x"),
        "intent_digest_mismatch",
    ),
    "result not normalized": (
        lambda data: _corrupt(data, intent__result={"ok": True, "tool_output": "raw"}),
        "invalid_intent",
    ),
    "error not sanitized": (
        lambda data: _corrupt(
            data,
            intent__action="fail",
            intent__error="two\nlines",
            intent__result=None,
        ),
        "invalid_intent",
    ),
    "complete with error": (
        lambda data: _corrupt(data, intent__error="x"),
        "invalid_record",
    ),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_invalid_records_are_quarantined_intact_and_never_delivered(
    store: OutboxStore, make_close: Factory, corruption: str
) -> None:
    damage, reason = CORRUPTIONS[corruption]
    data = damage(_valid_record_bytes(store, make_close))
    key = json.loads(_valid_record_bytes(store, make_close))["key"]
    (store.paths.pending / f"{key}.json").write_bytes(data)
    report = _replay_sending_nothing(store)
    assert report.invalid_quarantined == 1
    assert _files(store.paths.pending) == []
    assert (store.paths.quarantine / f"{key}.json").read_bytes() == data
    sidecar = _sidecar(store, key)
    assert sidecar["reason"] == reason
    assert sidecar["source"] == "pending"
    # Never deleted, never treated as delivered, however often replay runs.
    _replay_sending_nothing(store)
    _replay_sending_nothing(store)
    assert (store.paths.quarantine / f"{key}.json").read_bytes() == data
    assert store.snapshot().delivered_count == 0


def test_an_oversized_record_is_quarantined_without_being_read_whole(
    store: OutboxStore,
) -> None:
    from rein_aharness.outbox.record import MAX_RECORD_BYTES

    key = "a" * 64
    big = b"{" + b" " * (MAX_RECORD_BYTES + 10) + b"}"
    (store.paths.pending / f"{key}.json").write_bytes(big)
    _replay(store, Recorder(store))
    assert (store.paths.quarantine / f"{key}.json").read_bytes() == big
    sidecar = _sidecar(store, key)
    assert sidecar["reason"] == "oversized"


def test_a_record_whose_result_exceeds_64_kib_is_quarantined(
    store: OutboxStore, make_close: Factory
) -> None:
    data = _valid_record_bytes(store, make_close)
    key = json.loads(data)["key"]
    huge = {f"k{i:03d}": "x" * 2000 for i in range(33)}  # > 65536 bytes encoded
    (store.paths.pending / f"{key}.json").write_bytes(_corrupt(data, intent__result=huge))
    _replay_sending_nothing(store)
    sidecar = _sidecar(store, key)
    assert sidecar["reason"] == "invalid_intent"


def test_a_maximal_result_is_delivered(
    store: OutboxStore, make_close: Factory, maximal_result: dict[str, Any]
) -> None:
    store.enqueue_close(**make_close(result=maximal_result))
    recorder = Recorder(store)
    _replay(store, recorder)
    assert len(recorder.calls) == 1 and _files(store.paths.quarantine) == []


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo", "odd name", "sidecar name"])
def test_non_entries_in_pending_are_quarantined_intact(
    store: OutboxStore, make_close: Factory, tmp_path: Path, kind: str
) -> None:
    pending = store.paths.pending
    name = {"odd name": "notes.txt", "sidecar name": "x.reason.json"}.get(kind, "b" * 64 + ".json")
    if kind == "directory":
        (pending / name).mkdir()
        (pending / name / "inside").write_text("kept")
    elif kind == "symlink":
        target = tmp_path / "target.json"
        target.write_bytes(_valid_record_bytes(store, make_close))
        (pending / name).symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(pending / name)
    else:
        (pending / name).write_text("hello")
    _replay_sending_nothing(store)
    assert _files(pending) == []
    entries = [n for n in _files(store.paths.quarantine) if not n.endswith(".reason.json")]
    assert len(entries) == 1
    moved = store.paths.quarantine / entries[0]
    if kind == "directory":
        assert (moved / "inside").read_text() == "kept"
    elif kind == "symlink":
        assert moved.is_symlink()
    reasons = [
        json.loads((store.paths.quarantine / n).read_bytes())["reason"]
        for n in _files(store.paths.quarantine)
        if n.endswith(".reason.json")
    ]
    expected = {
        "directory": "not_regular_file",
        "symlink": "not_regular_file",
        "fifo": "not_regular_file",
        "odd name": "unexpected_name",
        "sidecar name": "unexpected_name",
    }[kind]
    assert reasons == [expected]


def test_a_pending_record_contradicting_its_delivered_twin_is_quarantined(
    store: OutboxStore, make_close: Factory, tmp_path: Path
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    _replay(store, Recorder(store))
    # Same key, different intent (written by another store), next to the delivered one.
    elsewhere = OutboxStore(tmp_path / "elsewhere")
    forged = _valid_record_bytes(elsewhere, make_close, result={"ok": False})
    assert json.loads(forged)["key"] == key
    (store.paths.pending / f"{key}.json").write_bytes(forged)
    _replay_sending_nothing(store)
    sidecar = _sidecar(store, key)
    assert sidecar["reason"] == "conflicts_with_delivered"


def test_invalid_records_in_delivered_are_quarantined_too(
    store: OutboxStore, make_close: Factory
) -> None:
    key = store.enqueue_close(**make_close()).record.key
    # A pending-state record in delivered/ is a directory/state mismatch.
    data = (store.paths.pending / f"{key}.json").read_bytes()
    (store.paths.pending / f"{key}.json").rename(store.paths.delivered / f"{key}.json")
    _replay(store, Recorder(store))
    assert (store.paths.quarantine / f"{key}.json").read_bytes() == data
    sidecar = _sidecar(store, key)
    assert (sidecar["reason"], sidecar["source"]) == ("state_mismatch", "delivered")


def test_quarantine_never_overwrites_an_earlier_quarantined_record(
    store: OutboxStore,
) -> None:
    for content in (b"first", b"second"):
        (store.paths.pending / "junk.txt").write_bytes(content)
        _replay(store, Recorder(store))
    kept = sorted(
        (store.paths.quarantine / name).read_bytes()
        for name in _files(store.paths.quarantine)
        if not name.endswith(".reason.json")
    )
    assert kept == [b"first", b"second"]
    sidecars = [n for n in _files(store.paths.quarantine) if n.endswith(".reason.json")]
    assert len(sidecars) == 2


def test_stray_temp_files_are_not_entries_and_are_removed(
    store: OutboxStore, make_close: Factory
) -> None:
    store.enqueue_close(**make_close())
    for directory in (store.paths.pending, store.paths.delivered, store.paths.quarantine):
        (directory / ".tmp-0123456789abcdef").write_bytes(b'{"half')
    assert len(store.snapshot().pending) == 1
    recorder = Recorder(store)
    _replay(store, recorder)
    assert len(recorder.calls) == 1
    leftovers = [p for p in store.paths.root.rglob(".tmp-*")]
    assert leftovers == []
    assert _files(store.paths.quarantine) == []


# -- delivered/ retention; quarantine is never pruned ------------------------------------


def test_delivered_retention_keeps_recent_and_newest_and_prunes_the_rest(
    outbox_root: Path, make_close: Factory, clock: Any
) -> None:
    from datetime import timedelta

    from rein_aharness.outbox import Retention

    store = OutboxStore(
        outbox_root, clock=clock, retention=Retention(max_age=timedelta(days=7), keep_newest=3)
    )
    for index in range(6):
        store.enqueue_close(**make_close(run_id=f"old-{index}"))
        _replay(store, Recorder(store))
        clock.advance(hours=1)
    (store.paths.pending / "junk.txt").write_text("quarantine me")
    _replay(store, Recorder(store))
    assert store.snapshot().delivered_count == 6  # all younger than 7 days
    clock.advance(days=8)
    store.enqueue_close(**make_close(run_id="fresh"))
    report = _replay(store, Recorder(store))
    # fresh + the 2 newest of the old ones are the newest 3; the other 4 are pruned
    assert report.pruned == 4
    runs = sorted(
        json.loads(path.read_bytes())["run_id"] for path in store.paths.delivered.iterdir()
    )
    assert runs == ["fresh", "old-4", "old-5"]
    assert "junk.txt" in _files(store.paths.quarantine)
    clock.advance(days=365)
    _replay(store, Recorder(store))
    assert "junk.txt" in _files(store.paths.quarantine)


def test_default_retention_is_seven_days_and_a_thousand_entries() -> None:
    from datetime import timedelta

    from rein_aharness.outbox import Retention

    assert Retention() == Retention(max_age=timedelta(days=7), keep_newest=1000)


def test_a_pruned_identity_can_be_enqueued_again(
    outbox_root: Path, make_close: Factory, clock: Any
) -> None:
    from datetime import timedelta

    from rein_aharness.outbox import Retention

    store = OutboxStore(
        outbox_root, clock=clock, retention=Retention(max_age=timedelta(days=1), keep_newest=0)
    )
    store.enqueue_close(**make_close())
    _replay(store, Recorder(store))
    clock.advance(days=2)
    _replay(store, Recorder(store))
    assert store.snapshot().delivered_count == 0
    again = store.enqueue_close(**make_close())
    assert again.state == "pending" and again.created


def test_a_pruned_identity_forgets_its_intent_and_accepts_a_different_one(
    outbox_root: Path, make_close: Factory, clock: Any
) -> None:
    """What store.py's docstring says: after pruning, a conflicting intent is no longer
    refused here; Activity Core's refusals (and fencing) are what stop it."""
    from datetime import timedelta

    from rein_aharness.outbox import OutboxConflictError, Retention

    store = OutboxStore(
        outbox_root, clock=clock, retention=Retention(max_age=timedelta(days=1), keep_newest=0)
    )
    store.enqueue_close(**make_close(transaction_id=f"rtx-{RUN}.1"))
    _replay(store, Recorder(store))
    different = make_close(transaction_id=f"rtx-{RUN}.1", result={"ok": False})
    with pytest.raises(OutboxConflictError):
        store.enqueue_close(**different)
    clock.advance(days=2)
    _replay(store, Recorder(store))
    again = store.enqueue_close(**different)
    assert again.state == "pending" and again.created
    assert again.record.attempt == 1  # still fenced to the attempt it names


def test_negative_limit_is_refused(store: OutboxStore) -> None:
    with pytest.raises(ValueError):
        _replay(store, Recorder(store), limit=-1)


# -- the attempt each entry is sent with; records written before it was stored --------------


def _rewrite(store: OutboxStore, key: str, **changes: Any) -> None:
    path = store.paths.pending / f"{key}.json"
    value = json.loads(path.read_bytes())
    for name, new in changes.items():
        if new is _DROP:
            del value[name]
        else:
            value[name] = new
    path.write_bytes(canonical_json(value))


_DROP = object()
_V1 = "rein-aharness/close-outbox-entry/v1"


def test_the_attempt_is_stored_and_reaches_the_callback(
    store: OutboxStore, make_close: Factory
) -> None:
    key = store.enqueue_close(**make_close(attempt=7)).record.key
    assert _record_on_disk(store, key)["attempt"] == 7
    recorder = Recorder(store)
    _replay(store, recorder)
    assert [record.attempt for record in recorder.calls] == [7]
    assert _record_on_disk(store, key, "delivered")["attempt"] == 7


@pytest.mark.parametrize(
    ("transaction_id", "attempt"),
    [(f"rtx-{RUN}.3", 3), ("txn-0001", None), (f"rtx-{RUN}", None), ("rtx-other.3", None)],
    ids=["worker-shape", "other-shape", "no-attempt", "other-run"],
)
def test_a_previous_version_record_is_delivered_with_the_attempt_its_transaction_names(
    store: OutboxStore, make_close: Factory, transaction_id: str, attempt: int | None
) -> None:
    key = store.enqueue_close(**make_close(transaction_id=transaction_id)).record.key
    _rewrite(store, key, format=_V1, attempt=_DROP)
    assert "attempt" not in _record_on_disk(store, key)
    recorder = Recorder(store, RuntimeError("retry later"))
    report = _replay(store, recorder)
    assert report.invalid_quarantined == 0 and _files(store.paths.quarantine) == []
    assert [record.attempt for record in recorder.calls] == [attempt]
    # the next change of its state wrote it as the current format, attempt included
    on_disk = _record_on_disk(store, key)
    assert (on_disk["format"], on_disk["attempt"], on_disk["attempts"]) == (
        "rein-aharness/close-outbox-entry/v2",
        attempt,
        1,
    )
    recorder.answer = CloseDisposition.applied
    _replay(store, recorder)
    assert [record.attempt for record in recorder.calls] == [attempt, attempt]
    assert store.snapshot().pending == () and store.snapshot().quarantined == ()


@pytest.mark.parametrize("stored", [2, None], ids=["another-attempt", "none"])
def test_an_attempt_contradicting_the_transaction_id_is_quarantined(
    store: OutboxStore, make_close: Factory, stored: int | None
) -> None:
    key = store.enqueue_close(**make_close(transaction_id=f"rtx-{RUN}.3")).record.key
    _rewrite(store, key, attempt=stored)
    _replay_sending_nothing(store)
    [entry] = store.snapshot().quarantined
    assert entry.reason == "attempt_mismatch"


def test_the_same_identity_under_another_attempt_is_a_conflict(
    store: OutboxStore, make_close: Factory
) -> None:
    from rein_aharness.outbox import OutboxConflictError

    store.enqueue_close(**make_close(attempt=1))
    with pytest.raises(OutboxConflictError) as caught:
        store.enqueue_close(**make_close(attempt=2))
    assert caught.value.fields == ("attempt",)


# -- entries recorded under another worker identity -------------------------------------------

OTHER = "rein-aharness@previous-id"


def test_entries_of_another_identity_are_quarantined_and_never_sent(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    foreign = store.enqueue_close(**make_close(run_id="old", worker_id=OTHER)).record.key
    clock.advance(seconds=1)
    own = store.enqueue_close(**make_close(run_id="new")).record.key
    recorder = Recorder(store)
    report = _replay(store, recorder, identity="rein-aharness@railiance01", quarantine_foreign=True)
    assert [record.key for record in recorder.calls] == [own]
    assert [(o.key, o.outcome, o.detail) for o in report.outcomes] == [
        (foreign, "quarantined", "foreign_worker_identity"),
        (own, "delivered", "applied"),
    ]
    assert report.invalid_quarantined == 0
    [entry] = store.snapshot().quarantined
    assert (entry.run_id, entry.worker_id, entry.reason) == (
        "old",
        OTHER,
        "foreign_worker_identity",
    )
    assert f"{foreign}.json" in _files(store.paths.quarantine)  # moved intact
    sidecar = _sidecar(store, foreign)
    assert sidecar["reason"] == "foreign_worker_identity"


def test_entries_of_another_identity_can_be_set_aside_and_stay_pending(
    store: OutboxStore, make_close: Factory, clock: Any
) -> None:
    store.enqueue_close(**make_close(run_id="old", worker_id=OTHER))
    for index in range(3):
        clock.advance(seconds=1)
        store.enqueue_close(**make_close(run_id=f"own-{index}"))
    recorder = Recorder(store)
    report = _replay(store, recorder, identity="rein-aharness@railiance01", limit=2)
    assert [record.run_id for record in recorder.calls] == ["own-0", "own-1"]
    assert report.count("set_aside") == 1 and report.count("delivered") == 2
    assert sorted(entry.run_id or "" for entry in store.snapshot().pending) == ["old", "own-2"]
    assert store.snapshot().quarantined == ()
    # and the identity that recorded it delivers it
    later = Recorder(store)
    _replay(store, later, identity=OTHER)
    assert [record.run_id for record in later.calls] == ["old"]


def test_without_an_identity_every_entry_is_sent(store: OutboxStore, make_close: Factory) -> None:
    store.enqueue_close(**make_close(run_id="old", worker_id=OTHER))
    recorder = Recorder(store)
    _replay(store, recorder)
    assert [record.run_id for record in recorder.calls] == ["old"]
