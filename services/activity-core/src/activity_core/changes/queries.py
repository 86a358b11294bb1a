"""Every SQL statement of `ops_run_changes` (db/migrations/0011_run_changes.sql).

Parameters are always `$n`. A row is written once (`INSERT_IF_ABSENT`) and never updated;
the upload runs it under the run's row lock, in the transaction of its fence
(queue/changes_upload.py), so a row only ever exists for an attempt that held the lease
when it was stored.
"""

from __future__ import annotations

__all__ = [
    "CHANGES_COLUMNS",
    "DELETE_EXPIRED",
    "GET_CHANGES",
    "GET_CHANGES_FACTS",
    "GET_CURRENT_CHANGES",
    "INSERT_IF_ABSENT",
]

# Everything but the bundle: what the close compares and what the views show.
CHANGES_COLUMNS = "run_id, attempt, digest, size, baseline, head_after, commits, paths, stored_at"

# $1 run_id, $2 attempt, $3 digest, $4 size, $5 baseline, $6 head_after, $7 commits,
# $8 paths, $9 bundle. No row back: a row of this attempt already exists (the caller
# reads it to tell a repeat of the same digest from a conflict).
INSERT_IF_ABSENT = f"""
INSERT INTO ops_run_changes
    (run_id, attempt, digest, size, baseline, head_after, commits, paths, bundle)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (run_id, attempt) DO NOTHING
RETURNING {CHANGES_COLUMNS}
"""

# One attempt's row with its bundle (the change view, the bundle download, publication).
GET_CHANGES = f"""
SELECT {CHANGES_COLUMNS}, bundle FROM ops_run_changes WHERE run_id = $1 AND attempt = $2
"""

# The row of the run's current attempt, with the bundle: what a run "has changed". A row
# of an earlier attempt is never the run's change (that attempt's work never closed).
GET_CURRENT_CHANGES = f"""
SELECT {", ".join("c." + c.strip() for c in CHANGES_COLUMNS.split(","))}, c.bundle
FROM ops_runs r
JOIN ops_run_changes c ON c.run_id = r.id AND c.attempt = r.attempt
WHERE r.id = $1
"""

# One attempt's row without the bundle: the upload's fence and the close's check read it
# under the run's row lock ($1 run_id, $2 the attempt fenced on).
GET_CHANGES_FACTS = f"""
SELECT {CHANGES_COLUMNS} FROM ops_run_changes WHERE run_id = $1 AND attempt = $2
"""

# Retention: the changes of runs terminal for longer than $1 days. A terminal run's
# updated_at is the time it became terminal (nothing changes a terminal row). Bounded by
# $2 rows per statement so one pass never holds many bundles' locks at once.
DELETE_EXPIRED = """
DELETE FROM ops_run_changes c
WHERE (c.run_id, c.attempt) IN (
    SELECT c2.run_id, c2.attempt
    FROM ops_run_changes c2
    JOIN ops_runs r ON r.id = c2.run_id
    WHERE r.state IN ('succeeded', 'failed', 'expired')
      AND r.updated_at < now() - make_interval(days => $1)
    LIMIT $2
)
"""
