"""Every SQL statement of `ops_run_publications` (db/migrations/0012_run_publications.sql).

Parameters are always `$n`. The API writes a row only in the transaction that starts its
workflow (start.py); the workflow's activities write it after that (record.py), each
statement an upsert keyed by the run, so a row the API's commit lost is written by the
workflow itself, and a replayed activity writes the same values again.
"""

from __future__ import annotations

__all__ = [
    "GET_BUNDLE",
    "GET_PUBLICATION",
    "LOCK_PUBLICATION",
    "MARK_WORKFLOW_ENDED",
    "PUBLICATION_COLUMNS",
    "PUBLISH_FACTS",
    "PUBLISH_SOURCE",
    "RECORD_FAILED",
    "RECORD_PUBLISHED",
    "RECORD_PULL_REQUEST",
    "REQUEST_PENDING",
]

PUBLICATION_COLUMNS = (
    "run_id, attempt, state, ref, commit, pull_request_url, error, requested_by, "
    "requested_at, published_at, workflow_id"
)

GET_PUBLICATION = f"SELECT {PUBLICATION_COLUMNS} FROM ops_run_publications WHERE run_id = $1"

# Under the run's publication lock: two requests for one run are serialized (the second
# sees the first's pending row once it committed). $1 run_id.
LOCK_PUBLICATION = (
    f"SELECT {PUBLICATION_COLUMNS} FROM ops_run_publications WHERE run_id = $1 FOR UPDATE"
)

# What a publish request checks, and what the workflow reads: the run (locked against a
# concurrent request: the row lock on ops_runs serializes the first request of a run,
# which has no publication row to lock yet), its stored changes of its current attempt.
# $1 run_id.
PUBLISH_SOURCE = """
SELECT r.id, r.state, r.attempt, r.title, r.target_repo, r.repository_grant, r.result,
       c.digest, c.baseline, c.head_after, c.commits, c.paths, c.size
FROM ops_runs r
LEFT JOIN ops_run_changes c ON c.run_id = r.id AND c.attempt = r.attempt
WHERE r.id = $1
FOR NO KEY UPDATE OF r
"""

# What the workflow checks the bundle against: the run's own row, not the changes row.
PUBLISH_FACTS = """
SELECT id, state, attempt, title, target_repo, repository_grant, result
FROM ops_runs WHERE id = $1
"""

# The bundle the workflow re-checks ($1 run_id, $2 attempt).
GET_BUNDLE = "SELECT bundle FROM ops_run_changes WHERE run_id = $1 AND attempt = $2"

# $1 run_id, $2 attempt, $3 ref, $4 requested_by, $5 workflow_id. A failed row is
# asked again: everything of the earlier try is cleared.
REQUEST_PENDING = f"""
INSERT INTO ops_run_publications
    (run_id, attempt, state, ref, requested_by, requested_at, workflow_id)
VALUES ($1, $2, 'pending', $3, $4, now(), $5)
ON CONFLICT (run_id) DO UPDATE SET
    attempt = EXCLUDED.attempt, state = 'pending', ref = EXCLUDED.ref, commit = NULL,
    pull_request_url = NULL, error = NULL, requested_by = EXCLUDED.requested_by,
    requested_at = EXCLUDED.requested_at, published_at = NULL,
    workflow_id = EXCLUDED.workflow_id, updated_at = now()
RETURNING {PUBLICATION_COLUMNS}
"""

# The workflow's outcomes. $1 run_id, $2 attempt, $3 ref, $4 requested_by,
# $5 requested_at, $6 workflow_id, then each statement's own. A row of another workflow
# (a newer request) is never overwritten by an older one's late activity.
_UPSERT = """
INSERT INTO ops_run_publications
    (run_id, attempt, state, ref, requested_by, requested_at, workflow_id, {columns})
VALUES ($1, $2, {state}, $3, $4, $5, $6, {values})
ON CONFLICT (run_id) DO UPDATE SET state = EXCLUDED.state, {updates}, updated_at = now()
WHERE ops_run_publications.workflow_id = EXCLUDED.workflow_id
"""

# $7 commit
RECORD_PUBLISHED = _UPSERT.format(
    columns="commit, published_at",
    state="'published'",
    values="$7, now()",
    updates="commit = EXCLUDED.commit, "
    "published_at = COALESCE(ops_run_publications.published_at, EXCLUDED.published_at), "
    "error = NULL",
)

# $7 error
RECORD_FAILED = _UPSERT.format(
    columns="error", state="'failed'", values="$7", updates="error = EXCLUDED.error"
)

# $1 run_id, $2 workflow_id, $3 pull_request_url (or NULL), $4 error (or NULL)
RECORD_PULL_REQUEST = """
UPDATE ops_run_publications
SET pull_request_url = $3, error = $4, updated_at = now()
WHERE run_id = $1 AND workflow_id = $2 AND state = 'published'
"""

# A pending row whose workflow closed in Temporal without recording a result (terminated,
# timed out, failed before its last word): failed with the reason, so it can be asked for
# again (temporal/publication_start.py). Only this workflow's pending row. $1 run_id,
# $2 workflow_id, $3 error
MARK_WORKFLOW_ENDED = f"""
UPDATE ops_run_publications
SET state = 'failed', error = $3, updated_at = now()
WHERE run_id = $1 AND workflow_id = $2 AND state = 'pending'
RETURNING {PUBLICATION_COLUMNS}
"""
