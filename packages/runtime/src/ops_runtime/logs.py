"""One JSON object per line, in the schema of docs/logging.md, for both services.

Each service's own `logs.configure_logging` decides what is logged at which level and the
fields every line of it carries; the line itself is made here, so the two services cannot
drift apart (tests-e2e/test_e2e_log_schema.py parses both services' real output).

`extra={...}` fields become top-level keys of the line, so pass identifiers and small
facts there (run_id, worker_id, request_id, code), never a token or a result body.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import sys
import time
from collections.abc import Mapping
from types import TracebackType

__all__ = ["RESERVED_KEYS", "JsonFormatter", "StderrHandler", "log_uncaught_to"]

# The keys the formatter writes itself; an `extra` field of the same name is dropped.
RESERVED_KEYS = ("ts", "level", "logger", "message", "exc_type", "traceback")

# What every LogRecord carries (and Formatter.format adds): anything else came in `extra`.
# LogRecord.__init__ sets its attributes first, so `extra` fields follow the first
# _RECORD_SIZE: only those are looked at (a line is written for every claim and close).
_RECORD_SIZE = len(logging.LogRecord("", 0, "", 0, "", (), None).__dict__)
_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys() | {"message", "asctime"}
)
# uvicorn's ANSI-coloured copy of the message is not a fact of the event.
_NEVER_WRITTEN = frozenset(RESERVED_KEYS) | {"color_message"}

# One encoder for every line: json.dumps builds a new JSONEncoder on each call that passes
# options, and a log line is written for every claim and every close. ASCII only, so a
# line survives any stderr encoding and no character inside it (U+2028, NEL) is taken
# for a line break; NaN and Infinity are not JSON, so they fail and are written as text.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=str)


def _timestamp(created: float) -> str:
    """RFC 3339 UTC with milliseconds, exactly as
    datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds") writes it
    (microseconds rounded half-even first, then cut to milliseconds), with `Z` for UTC."""
    global _last_second
    seconds = math.floor(created)
    micros = round((created - seconds) * 1_000_000)
    if micros == 1_000_000:
        seconds, micros = seconds + 1, 0
    # Lines come many to a second: the date and time of the second is written once.
    # One tuple, replaced whole, so a thread reading it never sees half of an update.
    cached = _last_second
    if cached[0] != seconds:
        cached = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
        _last_second = cached
    return f"{cached[1]}.{micros // 1000:03d}Z"


_last_second: tuple[int, str] = (-1, "")


class JsonFormatter(logging.Formatter):
    """One line of docs/logging.md's schema per record. `context`: fields every line
    carries unless its record has its own value for them."""

    def __init__(self, context: Mapping[str, object] | None = None) -> None:
        super().__init__()
        self._context = {
            key: value
            for key, value in (context or {}).items()
            if value is not None and key not in _NEVER_WRITTEN
        }

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(self._context)
        fields = record.__dict__
        if len(fields) > _RECORD_SIZE:
            for key, value in itertools.islice(fields.items(), _RECORD_SIZE, None):
                if (
                    value is not None
                    and key not in _RECORD_ATTRIBUTES
                    and key not in _NEVER_WRITTEN
                    and not key.startswith("_")
                ):
                    line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
            line["exc_type"] = record.exc_info[0].__name__
            line["traceback"] = record.exc_text
        try:
            return _ENCODER.encode(line)
        except (TypeError, ValueError):
            # a key JSON cannot take, a circular reference, NaN: such values as text
            for key in line.keys() - _NEVER_WRITTEN:
                line[key] = str(line[key])
            return _ENCODER.encode(line)


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the sys.stderr of the moment, as logging.lastResort does: a replaced
    stderr (a test's capture) never leaves a handler writing to a closed stream.

    `batch_in_event_loop`: lines below WARNING logged while an event loop runs in this
    thread are written together when the loop has run what is ready (one write and one
    flush for the lines of a loop iteration, instead of one each: a server logs a line for
    every claim and every close). A WARNING or worse, and any line outside a running loop,
    is written at once, after the lines still pending, so the order never changes.
    flush() writes what is pending: logging.shutdown() calls it at exit."""

    def __init__(self, *, batch_in_event_loop: bool = False) -> None:
        super().__init__()
        self._batch = batch_in_event_loop
        self._pending: list[str] = []

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _: object) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if not self._batch:
            super().emit(record)
            return
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        # called with the handler's lock held (Handler.handle), as flush() takes it
        self._pending.append(line)
        loop = asyncio._get_running_loop() if record.levelno < logging.WARNING else None
        if loop is None:
            self._write_pending()
        elif len(self._pending) == 1:
            loop.call_soon(self.flush)

    def flush(self) -> None:
        with self.lock or contextlib.nullcontext():
            self._write_pending()

    def _write_pending(self) -> None:
        stream = sys.stderr
        if self._pending:
            text = "\n".join(self._pending) + "\n"
            self._pending.clear()
            with contextlib.suppress(Exception):
                # as StreamHandler: a stream that cannot be written to loses the lines,
                # never the caller's request
                stream.write(text)
        if hasattr(stream, "flush"):
            with contextlib.suppress(Exception):
                stream.flush()


def log_uncaught_to(logger_name: str) -> None:
    """Make an uncaught exception one CRITICAL line of `logger_name`, traceback included,
    instead of Python's text on stderr (KeyboardInterrupt keeps Python's own)."""

    def log_uncaught(
        kind: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, exc, tb)
            return
        logging.getLogger(logger_name).critical("uncaught exception", exc_info=(kind, exc, tb))

    sys.excepthook = log_uncaught
