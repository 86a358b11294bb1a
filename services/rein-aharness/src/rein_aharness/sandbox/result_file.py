"""The result file an approach may write, and the worker's strict reading of it.

Every command approach gets `REIN_RESULT_FILE`: inside a bwrap sandbox
`/rein/report/result.json`, on a per-attempt directory the worker creates in the
attempt's scratch directory (beside the worktree, never in it, so the report never lands
in a commit) and binds read-write at `/rein/report`. Its disk use counts towards the
profile's `worktree_mb` (growth.py), like the worktree's.

After the approach has exited (its whole sandbox is gone, so nothing can swap the file
while it is read) the worker reads it, and refuses the whole report, with one of
`ops_evidence.RESULT_REPORT_PROBLEMS`, when it is:

| problem              | what                                                         |
| -------------------- | ------------------------------------------------------------ |
| `symlink`            | a symlink (opened with O_NOFOLLOW: never followed)           |
| `not_a_regular_file` | a directory, FIFO (opened non-blocking), socket or device    |
| `too_large`          | over MAX_REPORT_BYTES (64 KiB; refused by its size, not read) |
| `unreadable`         | any other error opening or reading it                        |
| `not_json`           | not UTF-8 JSON                                               |
| `not_finite`         | NaN, Infinity, or a float that overflows to it               |
| `duplicate_key`      | an object with the same key twice (no last-wins guessing)    |
| `too_deep`           | nested deeper than MAX_REPORT_DEPTH (checked before parsing) |
| `not_an_object`      | valid JSON, but not an object                                |

No file at all is no report: nothing is added to the evidence. Within an object, keys
not in REPORT_FIELDS, and fields the profile's `report` does not list, are dropped.
Each allowed field is checked against ops_evidence's validators; an invalid one (a
negative, fractional or over-2**53 count, a model name that is not an identifier, a
bool for a number) is dropped by itself and the report becomes `partial`, with problem
`out_of_bounds`. Nothing is clipped: a clipped count would be a number nobody measured.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from ops_evidence import (
    MAX_INT,
    TOOL_EVENTS_COMPLETENESS,
    identifier,
    non_negative_int,
)

__all__ = [
    "MAX_REPORT_BYTES",
    "MAX_REPORT_DEPTH",
    "MAX_SUMMARY_CHARS",
    "RESULT_DIR",
    "RESULT_FILE",
    "RESULT_FILE_NAME",
    "Report",
    "make_report_dir",
    "read_report",
    "result_mount_arguments",
]

RESULT_DIR = PurePosixPath("/rein/report")
RESULT_FILE_NAME = "result.json"
RESULT_FILE = RESULT_DIR / RESULT_FILE_NAME
MAX_REPORT_BYTES = 64 * 1024
MAX_REPORT_DEPTH = 4
MAX_SUMMARY_CHARS = 200
# Digits past which an integer cannot be a bounded count (MAX_INT has 16); parsed as
# out of range instead of making Python's int() do (or refuse) the work.
_MAX_INT_DIGITS = 17

ReportStatus = Literal["accepted", "partial", "refused"]


@dataclass(frozen=True)
class Report:
    """What passed of the approach's report; `status` None: it wrote none."""

    status: ReportStatus | None = None
    problem: str | None = None
    resolved_model: str | None = None
    tokens: dict[str, int] = field(default_factory=dict)  # input, output, total
    tool_events_count: int | None = None
    tool_events_completeness: str | None = None
    summary: str | None = None  # the worker's info log only, never evidence


class _Refused(Exception):
    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


def make_report_dir(scratch: Path) -> Path:
    """The attempt's private result directory, in its scratch directory (0700)."""
    directory = scratch / "report"
    directory.mkdir(mode=0o700)
    return directory


def result_mount_arguments(report_dir: Path) -> list[str]:
    """bwrap arguments that show `report_dir` read-write at RESULT_DIR."""
    return ["--bind", os.fspath(report_dir), str(RESULT_DIR)]


def read_report(report_dir: Path, allowed: frozenset[str]) -> Report:
    """The report in `report_dir`, read and checked as the module says; never raises."""
    try:
        data = _read_bounded(report_dir)
        if data is None:
            return Report()
        raw = _parse(data)
    except _Refused as refused:
        return Report(status="refused", problem=refused.problem)
    return _pick(raw, allowed)


def _read_bounded(report_dir: Path) -> bytes | None:
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        directory = os.open(report_dir, flags | os.O_DIRECTORY)
    except OSError:
        raise _Refused("unreadable") from None
    try:
        try:
            fd = os.open(
                RESULT_FILE_NAME,
                flags | os.O_NONBLOCK | os.O_NOCTTY,
                dir_fd=directory,
            )
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _Refused("symlink" if exc.errno == errno.ELOOP else "unreadable") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _Refused("not_a_regular_file")
            if info.st_size > MAX_REPORT_BYTES:
                raise _Refused("too_large")
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_REPORT_BYTES:
                chunk = os.read(fd, MAX_REPORT_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_REPORT_BYTES:
                raise _Refused("too_large")
            return b"".join(chunks)
        except OSError:
            raise _Refused("unreadable") from None
        finally:
            os.close(fd)
    finally:
        os.close(directory)


def _parse(data: bytes) -> dict[str, object]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("not_json") from None
    if _depth(text) > MAX_REPORT_DEPTH:
        raise _Refused("too_deep")
    try:
        value = json.loads(
            text,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
            object_pairs_hook=_no_duplicates,
        )
    except _Refused:
        raise
    except (ValueError, RecursionError):
        raise _Refused("not_json") from None
    if type(value) is not dict:
        raise _Refused("not_an_object")
    return value


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects, strings skipped (before json.loads,
    whose recursion a 64 KiB file of `[` would otherwise exhaust)."""
    deepest = depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> object:
    raise _Refused("not_finite")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused("not_finite")
    return value


def _bounded_int(text: str) -> int:
    return int(text) if len(text.lstrip("-")) <= _MAX_INT_DIGITS else MAX_INT + 1


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _Refused("duplicate_key")
    return result


def _summary(value: object) -> str | None:
    if type(value) is not str or not 1 <= len(value) <= MAX_SUMMARY_CHARS:
        return None
    return value if value.isprintable() else None


def _completeness(value: object) -> str | None:
    return value if type(value) is str and value in TOOL_EVENTS_COMPLETENESS else None


def _pick(raw: dict[str, object], allowed: frozenset[str]) -> Report:
    dropped = False

    def take(key: str, check: Callable[[object], object]) -> object:
        nonlocal dropped
        if key not in raw or key not in allowed:
            return None
        value = check(raw[key])
        if value is None:
            dropped = True
        return value

    tokens: dict[str, int] = {}
    if "tokens_spent" in raw and "tokens_spent" in allowed:
        spent = raw["tokens_spent"]
        if type(spent) is dict and spent:
            for part in ("input", "output", "total"):
                if part in spent:
                    part_count = non_negative_int(spent[part])
                    if part_count is None:
                        dropped = True
                    else:
                        tokens[part] = part_count
        else:
            dropped = True
    model = take("resolved_model", identifier)
    count = take("tool_events_count", non_negative_int)
    completeness = take("tool_events_completeness", _completeness)
    summary = take("summary", _summary)
    return Report(
        status="partial" if dropped else "accepted",
        problem="out_of_bounds" if dropped else None,
        resolved_model=model if type(model) is str else None,
        tokens=tokens,
        tool_events_count=count if type(count) is int else None,
        tool_events_completeness=completeness if type(completeness) is str else None,
        summary=summary if type(summary) is str else None,
    )
