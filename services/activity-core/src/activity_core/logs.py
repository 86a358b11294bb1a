"""Structured JSON logs: one object per line, with the run and worker ids where known.

Never logs a token or a result body: callers pass identifiers through `extra`, and only
the keys in _CONTEXT_KEYS are copied into the line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

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


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in _CONTEXT_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            line["error_class"] = record.exc_info[0].__name__
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str = "INFO") -> None:
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
