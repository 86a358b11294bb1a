"""The JSON log line of both services: its timestamp and its fields."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ops_runtime import logs
from ops_runtime.logs import JsonFormatter


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


@given(
    st.lists(
        st.floats(min_value=1_764_790_519.0, max_value=1_764_790_523.0, allow_nan=False),
        min_size=2,
        max_size=50,
    )
)
def test_the_timestamps_of_lines_many_to_a_second_are_each_their_own(
    times: list[float],
) -> None:
    # Each second's date and time is written once and then reused: lines in the same
    # second, the next one, and back again (another thread's older record) stay exact.
    for created in [*sorted(times), *times]:
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


def _batched_logger(name: str) -> tuple[logging.Logger, logs.StderrHandler]:
    handler = logs.StderrHandler(batch_in_event_loop=True)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, handler


def test_lines_of_one_loop_iteration_are_written_together_after_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger, _ = _batched_logger("test.batched.iteration")
    seen_inside: list[str] = []

    async def log_a_few() -> None:
        for n in range(3):
            logger.info("line %d", n)
        seen_inside.append(capsys.readouterr().err)
        await asyncio.sleep(0)  # the loop runs what is ready: the pending lines go out
        seen_inside.append(capsys.readouterr().err)

    asyncio.run(log_a_few())
    assert seen_inside == ["", "INFO line 0\nINFO line 1\nINFO line 2\n"]


def test_a_warning_and_a_line_outside_a_loop_are_written_at_once_after_what_is_pending(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger, _ = _batched_logger("test.batched.warning")
    seen_inside: list[str] = []

    async def log_then_warn() -> None:
        logger.info("first")
        logger.warning("then this")
        seen_inside.append(capsys.readouterr().err)

    asyncio.run(log_then_warn())
    assert seen_inside == ["INFO first\nWARNING then this\n"]
    logger.info("no loop")
    assert capsys.readouterr().err == "INFO no loop\n"


def test_flush_writes_what_a_loop_that_stopped_left_pending(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A loop that ends right after a line never runs the write it scheduled; flush()
    # (logging.shutdown at exit) writes it.
    logger, handler = _batched_logger("test.batched.flush")
    loop = asyncio.new_event_loop()
    try:

        async def log_and_stop() -> None:
            logger.info("last words")
            loop.stop()

        task = loop.create_task(log_and_stop())
        loop.run_forever()
        assert task.done()
    finally:
        loop.close()
    # stop() ends the loop after the callbacks that were ready: the write it scheduled
    # meanwhile never ran
    assert capsys.readouterr().err == ""
    handler.flush()
    assert capsys.readouterr().err == "INFO last words\n"
