"""The read projection every queue answer goes through (get, list, claim, heartbeat,
close), in one place so no answer can leave without it."""

from __future__ import annotations

from typing import Any

import asyncpg

from activity_core.queue import queries
from ops_evidence import normalize_result, sanitize_error

__all__ = ["project"]


def project(row: asyncpg.Record | dict[str, Any], *, normalized: bool = False) -> dict[str, Any]:
    """The answer for one row: historic rows are normalized again before they leave, the
    result by the evidence allowlist and the error text by the function that bounds it
    when it is stored. `normalized`: the row's result and error are the ones this
    statement just stored, normalized on the way in (an applied close), so normalizing
    them again would change nothing.

    `requeued_as` comes from the statements that compute it (get, list, a reconciled
    close); every other answer is of a run that was open or claimed until that statement,
    which no requeue can have taken as its original (only failed and expired runs are)."""
    run = {key: row[key] for key in queries.RUN_COLUMN_NAMES}
    if not normalized:
        if run["result"] is not None:
            run["result"] = normalize_result(run["result"])
        if run["last_error"] is not None:
            run["last_error"] = sanitize_error(run["last_error"])
    run["requeued_as"] = row.get("requeued_as") or []
    # only the single-run read joins it (GET_RUN); the publication's error is ours
    publication = row.get("publication")
    if publication is not None:
        run["publication"] = publication
    return run
