"""Follow the ops runs of one fire, one terminal line per state change.

Two sources. activity-core's API (`GET /ops/automations/{id}/runs/{run_id}`) says which
ops runs the fire created and, at the end, their final state; it is polled, so a run
that is claimed and completed between two polls would skip `claimed`. activity-core's
own log says every transition as it happens (its queue lines are JSON with `run_id` and
`worker_id`: "run claimed", "run complete applied", "run fail reopened", "stale lease
expired", ...), so the lines come from there, in order, and the API only fills in a final
state the log did not show.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["TERMINAL", "Change", "RunFollower"]

TERMINAL = frozenset({"succeeded", "failed", "expired"})

# activity-core queue log message -> the state it leaves the run in
_TRANSITIONS = {
    "run claimed": "claimed",
    "run complete applied": "succeeded",
    "run fail applied": "failed",
    "run fail reopened": "open",
    "stale lease reopened": "open",
    "stale lease expired": "expired",
}
_NOTES = {
    "run fail reopened": "failed, reopened",
    "stale lease reopened": "lease ended, reopened",
    "stale lease expired": "lease ended at the attempt ceiling",
}


@dataclass(frozen=True)
class Change:
    ops_run_id: str
    state: str
    attempt: int
    worker: str | None
    at: datetime | None
    note: str | None = None

    def line(self) -> str:
        stamp = (self.at or datetime.now().astimezone()).astimezone().strftime("%H:%M:%S.%f")[:-3]
        worker = f"  worker {self.worker}" if self.worker else ""
        note = f"  ({self.note})" if self.note else ""
        return (
            f"  {stamp}  ops run {self.ops_run_id}  {self.state:<9}  "
            f"attempt {self.attempt}{worker}{note}"
        )


@dataclass
class _Run:
    state: str = "open"
    attempt: int = 0
    worker: str | None = None


class RunFollower:
    """Feed it the API's view with `update(fire)`; it answers the new changes."""

    def __init__(self, queue_log: Path) -> None:
        self._log = queue_log
        self._offset = _size(queue_log)
        self._partial = b""
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self.runs: dict[str, _Run] = {}

    def update(self, fire: dict[str, Any] | None) -> list[Change]:
        changes: list[Change] = []
        for event in self._read_events():
            self._pending.setdefault(event["run_id"], []).append(event)
        for ops_run in fire["ops_runs"] if fire is not None else []:
            run_id = ops_run["id"]
            if run_id not in self.runs:
                self.runs[run_id] = _Run()
                changes.append(Change(run_id, "open", 0, None, _parse_time(ops_run["created_at"])))
            changes.extend(self._apply(run_id, self._pending.pop(run_id, [])))
        return changes

    def settle(self, fire: dict[str, Any]) -> list[Change]:
        """Final states from the API that the log has not shown (a line it missed)."""
        changes = self.update(fire)
        for ops_run in fire["ops_runs"]:
            run = self.runs[ops_run["id"]]
            if ops_run["state"] != run.state:
                run.state, run.attempt = ops_run["state"], ops_run["attempt"]
                run.worker = ops_run["claim_owner"]
                changes.append(Change(ops_run["id"], run.state, run.attempt, run.worker, None))
        return changes

    def done(self, fire: dict[str, Any]) -> bool:
        return fire["status"] in ("emitted", "failed") and all(
            ops_run["state"] in TERMINAL for ops_run in fire["ops_runs"]
        )

    def _apply(self, run_id: str, events: Iterable[dict[str, Any]]) -> list[Change]:
        run = self.runs[run_id]
        changes = []
        for event in events:
            message = event["message"]
            state = _TRANSITIONS.get(message)
            if state is None:
                continue
            if message == "run claimed":
                run.attempt = int(event.get("attempt", run.attempt + 1))
                run.worker = event.get("worker_id")
            run.state = state
            changes.append(
                Change(
                    run_id,
                    state,
                    run.attempt,
                    event.get("worker_id") or run.worker,
                    _parse_time(event.get("ts")),
                    _NOTES.get(message),
                )
            )
        return changes

    def _read_events(self) -> list[dict[str, Any]]:
        try:
            with self._log.open("rb") as log:
                log.seek(self._offset)
                chunk = log.read()
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        events = []
        for raw in lines:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if (
                isinstance(line, dict)
                and line.get("logger") == "activity_core.queue"
                and isinstance(line.get("run_id"), str)
                and isinstance(line.get("message"), str)
            ):
                events.append(line)
        return events


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
