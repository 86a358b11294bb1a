"""Structured JSON logs: one object per line, with the run and worker ids where known.

Never logs a token or a result body: callers pass identifiers through `extra`, and only
the keys in _CONTEXT_KEYS are copied into the line.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time

_CONTEXT_KEYS = (
    "run_id",
    "worker_id",
    "attempt",
    "disposition",
    "code",
    "trigger",
    "activity_id",
    "workflow_id",
    "path",
    "method",
    "status",
)


# One encoder for every line: json.dumps builds a new JSONEncoder on each call that passes
# options, and a log line is written for every claim and every close.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


def _timestamp(created: float) -> str:
    """ISO 8601 UTC with milliseconds, exactly as
    datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds") writes it
    (microseconds rounded half-even first, then cut to milliseconds)."""
    seconds = math.floor(created)
    micros = round((created - seconds) * 1_000_000)
    if micros == 1_000_000:
        seconds, micros = seconds + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros // 1000:03d}+00:00"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = record.__dict__
        for key in _CONTEXT_KEYS:
            value = fields.get(key)
            if value is not None:
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            line["error_class"] = record.exc_info[0].__name__
        return _ENCODER.encode(line)


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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # uvicorn's access log would print request lines in its own format; ours are enough
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
