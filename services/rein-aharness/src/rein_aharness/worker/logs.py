"""The worker's log lines: one JSON object per line on stderr, in docs/logging.md's schema
(made by `ops_runtime.logs`, as activity-core's are). Every line of a worker carries its
`worker_id`.

Completion events without a sink are lines of the `rein_aharness.events` logger whose
`message` is the event's JSON.
"""

from __future__ import annotations

import logging
from typing import TextIO

from ops_runtime.logs import RESERVED_KEYS, JsonFormatter, StderrHandler, log_uncaught_to

__all__ = ["RESERVED_KEYS", "JsonFormatter", "configure_logging"]

# Loggers whose records are the worker's own: they log at the configured level.
_OURS = ("rein_aharness", "ops_runtime")


def configure_logging(
    level: str = "INFO", stream: TextIO | None = None, *, worker_id: str | None = None
) -> None:
    """The worker's records at `level`, other libraries' at WARNING and above (an httpx
    line per request would drown the worker's own), all in one format on one stream."""
    handler = StderrHandler() if stream is None else logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter({"worker_id": worker_id}))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.WARNING, logging.getLevelNamesMapping()[level]))
    for name in _OURS:
        ours = logging.getLogger(name)
        ours.handlers[:] = []
        ours.propagate = True
        ours.setLevel(level)
    log_uncaught_to("rein_aharness")
