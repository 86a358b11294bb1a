"""Structured JSON logs: one object per line on stderr, in the schema of docs/logging.md
(made by `ops_runtime.logs`, as rein-aharness's are).

`extra={...}` fields become top-level keys of the line, so pass identifiers and small
facts there (run_id, worker_id, request_id, code), never a token or a result body.
"""

from __future__ import annotations

import logging

from ops_runtime.logs import RESERVED_KEYS, JsonFormatter, StderrHandler, log_uncaught_to

__all__ = ["RESERVED_KEYS", "JsonFormatter", "configure_logging"]


def configure_logging(level: str = "INFO") -> None:
    # A line is written for every claim and every close: in bench/claim_throughput.py the
    # two lines of a claim+complete cost about a tenth of the API's CPU. Our lines carry
    # none of the caller's file, line, function, process, thread or process name, so the
    # records need not collect them (a stack walk, a getpid syscall, thread lookups); the
    # logging HOWTO's "Optimization" section names these switches.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # Lines of one event-loop iteration go out in one write (ops_runtime.logs); a WARNING
    # or worse at once.
    handler = StderrHandler(batch_in_event_loop=True)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # uvicorn's access log would print request lines in its own format; ours are enough
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    log_uncaught_to("activity_core")
