"""The JSON log line: its timestamp, its fields, and what a record no longer collects."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from activity_core import logs
from activity_core.logs import JsonFormatter, configure_logging


def _isoformat_z(created: float) -> str:
    written = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    return written.removesuffix("+00:00") + "Z"


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_the_timestamp_is_what_datetime_isoformat_writes(created: float) -> None:
    assert logs._timestamp(created) == _isoformat_z(created)


@pytest.mark.parametrize(
    "created",
    [0.0, 1_764_790_519.9995, 1_764_790_519.9999996, 1_764_790_519.0005, 1_764_790_520.0],
)
def test_the_timestamp_rounds_as_datetime_does_at_the_edges(created: float) -> None:
    assert logs._timestamp(created) == _isoformat_z(created)


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "activity_core.queue", logging.INFO, "x.py", 1, "run %s", ("é",), None
    )
    record.created = 1_764_790_519.661
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_line_has_the_fields_and_the_extra_fields_that_are_known() -> None:
    line = JsonFormatter().format(
        _record(run_id="r-1", worker_id="w-1", attempt=2, request_id=None, code="not_found")
    )
    assert json.loads(line) == {
        "ts": "2025-12-03T19:35:19.661Z",
        "level": "INFO",
        "logger": "activity_core.queue",
        "message": "run é",
        "run_id": "r-1",
        "worker_id": "w-1",
        "attempt": 2,
        "code": "not_found",
    }
    assert line.isascii()  # é as \\u00e9: no stderr encoding or line splitter can break it
    assert "\n" not in line


def test_a_value_json_cannot_encode_is_text_and_an_exception_has_its_traceback() -> None:
    try:
        raise KeyError("boom")
    except KeyError:
        record = _record(run_id=datetime(2026, 1, 2, tzinfo=UTC), elapsed=float("nan"))
        record.exc_info = sys.exc_info()
    text = JsonFormatter().format(record)
    line = json.loads(text)
    assert line["run_id"] == "2026-01-02 00:00:00+00:00"
    assert line["elapsed"] == "nan"
    assert line["exc_type"] == "KeyError"
    assert line["traceback"].startswith("Traceback (most recent call last):\n")
    assert line["traceback"].endswith("KeyError: 'boom'")
    assert "\n" not in text


@pytest.fixture
def restored_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing"):
        monkeypatch.setattr(logging, name, getattr(logging, name))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restored_logging")
def test_configured_records_skip_the_caller_process_and_thread_lookups() -> None:
    configure_logging("INFO")
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logging.getLogger().addHandler(Keep())
    logging.getLogger("activity_core.queue").info("run claimed", extra={"run_id": "r"})
    [record] = seen
    # No stack walk for the caller, no getpid, no thread or process-name lookup.
    assert (record.lineno, record.funcName) == (0, "(unknown function)")
    assert record.process is None
    assert record.thread is None
    assert record.processName is None
    assert json.loads(JsonFormatter().format(record))["run_id"] == "r"
