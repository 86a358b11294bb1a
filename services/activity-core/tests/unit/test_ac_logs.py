"""What activity-core's configured records no longer collect (the formatter itself:
packages/runtime/tests/test_runtime_logs.py)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from activity_core.logs import JsonFormatter, configure_logging


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
