"""Render an outbox snapshot (and a replay report) as a table or as stable JSON.

JSON shape (`format` versions it; keys are sorted; `replay` is null for status)::

    {"format": "rein-aharness/close-outbox-report/v1",
     "root": "/.../close-outbox",
     "counts": {"pending": 1, "delivered": 12, "quarantined": 1},
     "entries": [{"state": "pending" | "quarantined", "name": "<file>", "key": ...,
                  "run_id": ..., "action": "complete" | "fail" | null,
                  "worker_id": "<recorded identity>" | null,
                  "run_attempt": 2 | null,
                  "attempts": 2, "last_failure_class": "QueueTransportError" | null,
                  "age_seconds": 95, "reason": null | "<quarantine reason>",
                  "code": null | "<refusal code>"}],
     "replay": null | {"attempted": 3, "delivered": 1, "cancelled": 0, "failed": 1,
                       "quarantined": 1,
                       "skipped": 0, "set_aside": 0, "invalid_quarantined": 0,
                       "pruned": 0, "stopped_early": false}}

When the outbox lost entries it knew pending (outbox/ledger.py), `counts` also has
`"lost": N` and each is an entry `{"state": "lost", "key": ..., "name": "<key>.json"}`
with its other fields null; a clean outbox's document is unchanged.

With `close-outbox adopt`, `adopted` is `{"outbox_id": ..., "created": bool,
"replaced": null | "<outbox id the state directory had recorded>",
"written_off": ["<key>", ...]}`; it is absent otherwise.

`attempts` counts delivery attempts; `run_attempt` is the claim attempt the close was
decided under (sent with it for fencing). `cancelled` in `replay` counts closes Activity
Core refused because an operator had cancelled the run: settled, kept in delivered/ with
disposition `cancelled`, never quarantined. `quarantined` in `replay` counts conclusive
refusals and entries of another worker identity (reason `foreign_worker_identity`);
`set_aside` counts entries of another identity that an operator's replay (with
ACTIVITY_CORE_WORKER_ID set) left pending. Fields an unreadable record cannot provide
are null.
"""

from __future__ import annotations

import json
from typing import Any

from rein_aharness.outbox.identity import Adoption
from rein_aharness.outbox.record import QuarantineReason
from rein_aharness.outbox.replay import ReplayReport
from rein_aharness.outbox.store import EntrySummary, OutboxSnapshot

__all__ = ["REPORT_FORMAT", "format_age", "render_json", "render_table", "report_dict"]

REPORT_FORMAT = "rein-aharness/close-outbox-report/v1"

_COLUMNS = ("STATE", "RUN ID", "ACTION", "ATTEMPTS", "LAST FAILURE", "AGE", "WORKER", "REASON")


def _age_seconds(entry: EntrySummary, snapshot: OutboxSnapshot) -> int | None:
    if entry.created_at is None:
        return None
    return max(0, int((snapshot.taken_at - entry.created_at).total_seconds()))


def format_age(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def report_dict(
    snapshot: OutboxSnapshot,
    replay: ReplayReport | None = None,
    adoption: Adoption | None = None,
) -> dict[str, Any]:
    entries = [*snapshot.pending, *snapshot.quarantined]
    counts = {
        "pending": len(snapshot.pending),
        "delivered": snapshot.delivered_count,
        "quarantined": len(snapshot.quarantined),
    }
    if snapshot.lost:
        counts["lost"] = len(snapshot.lost)
    data = {
        "format": REPORT_FORMAT,
        "root": str(snapshot.root),
        "counts": counts,
        "entries": [
            {
                "state": entry.state,
                "name": entry.name,
                "key": entry.key,
                "run_id": entry.run_id,
                "action": entry.action,
                "worker_id": entry.worker_id,
                "run_attempt": entry.run_attempt,
                "attempts": entry.attempts,
                "last_failure_class": entry.last_failure_class,
                "age_seconds": _age_seconds(entry, snapshot),
                "reason": entry.reason,
                "code": entry.code,
            }
            for entry in entries
        ]
        + [_lost_dict(key) for key in snapshot.lost],
        "replay": None if replay is None else _replay_dict(replay),
    }
    if adoption is not None:
        data["adopted"] = {
            "outbox_id": adoption.marker.outbox_id,
            "created": adoption.created,
            "replaced": adoption.replaced,
            "written_off": list(adoption.written_off),
        }
    return data


def _lost_dict(key: str) -> dict[str, Any]:
    return {
        "state": "lost",
        "name": f"{key}.json",
        "key": key,
        "run_id": None,
        "action": None,
        "worker_id": None,
        "run_attempt": None,
        "attempts": None,
        "last_failure_class": None,
        "age_seconds": None,
        "reason": "known pending, found nowhere",
        "code": None,
    }


def _replay_dict(replay: ReplayReport) -> dict[str, Any]:
    return {
        "attempted": replay.count("delivered")
        + replay.count("cancelled")
        + replay.count("failed")
        + _refused(replay),
        "delivered": replay.count("delivered"),
        "cancelled": replay.count("cancelled"),
        "failed": replay.count("failed"),
        "quarantined": replay.count("quarantined"),
        "skipped": replay.count("skipped"),
        "set_aside": replay.count("set_aside"),
        "invalid_quarantined": replay.invalid_quarantined,
        "pruned": replay.pruned,
        "stopped_early": replay.stopped_early,
    }


def _refused(replay: ReplayReport) -> int:
    """Quarantined after a request (a conclusive refusal), not for another identity."""
    return sum(
        1
        for item in replay.outcomes
        if item.outcome == "quarantined" and item.detail != QuarantineReason.foreign_worker_identity
    )


def render_json(
    snapshot: OutboxSnapshot,
    replay: ReplayReport | None = None,
    adoption: Adoption | None = None,
) -> str:
    return json.dumps(report_dict(snapshot, replay, adoption), sort_keys=True, indent=2)


def render_table(
    snapshot: OutboxSnapshot,
    replay: ReplayReport | None = None,
    adoption: Adoption | None = None,
) -> str:
    data = report_dict(snapshot, replay, adoption)
    counts = data["counts"]
    lines = [f"close outbox: {data['root']}"]
    if adoption is not None:
        lines.append(_adoption_line(adoption))
    if replay is not None:
        summary = data["replay"]
        lines.append(
            "replay: {attempted} attempted, {delivered} delivered, {cancelled} settled as "
            "cancelled (the run was cancelled by an operator), {failed} failed, "
            "{quarantined} quarantined (refused or another worker identity), "
            "{set_aside} set aside (another worker identity), {invalid_quarantined} invalid "
            "records quarantined, {pruned} delivered records pruned".format(**summary)
            + (
                " - stopped early: Activity Core unreachable or refusing credentials"
                if summary["stopped_early"]
                else ""
            )
        )
    lines.append(
        f"pending {counts['pending']}  delivered {counts['delivered']}  "
        f"quarantined {counts['quarantined']}"
    )
    if "lost" in counts:
        lines.append(
            f"LOST {counts['lost']}: entries the outbox knew pending are in none of pending/, "
            "delivered/, quarantine/; restore them, or write them off with "
            "`close-outbox adopt`"
        )
    if not data["entries"]:
        return "\n".join(lines)
    rows = [_COLUMNS]
    for entry in data["entries"]:
        reason = entry["reason"] or "-"
        if entry["code"]:
            reason = f"{reason} ({entry['code']})"
        rows.append(
            (
                entry["state"],
                entry["run_id"] or entry["name"],
                entry["action"] or "-",
                "-" if entry["attempts"] is None else str(entry["attempts"]),
                entry["last_failure_class"] or "-",
                format_age(entry["age_seconds"]),
                entry["worker_id"] or "-",
                reason,
            )
        )
    widths = [max(len(row[index]) for row in rows) for index in range(len(_COLUMNS))]
    lines.append("")
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _adoption_line(adoption: Adoption) -> str:
    what = "created" if adoption.created else "adopted"
    line = f"{what} and pinned outbox {adoption.marker.outbox_id}"
    if adoption.replaced is not None:
        line += f" (the state directory had recorded outbox {adoption.replaced})"
    if adoption.written_off:
        line += f"; wrote off {len(adoption.written_off)} lost entries: " + ", ".join(
            adoption.written_off
        )
    return line
