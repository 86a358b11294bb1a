"""Every SQL statement of definition sync, in one place. Parameters are `$n` only."""

from __future__ import annotations

__all__ = [
    "DEFINITIONS_FOR_SYNC",
    "INSERT_DEFINITION",
    "RETIRE_DEFINITION",
    "SCHEDULES_LOCK",
    "SCHEDULES_UNLOCK",
    "SYNC_LOCK",
    "SYNC_LOCK_NAMESPACE",
    "UPDATE_DEFINITION",
]

# Two syncs at once would each read the table, decide, and write: serialize them for the
# rest of the transaction. Two-key form, so it cannot collide with single-key locks
# (the migration lock). $1 = SYNC_LOCK_NAMESPACE
SYNC_LOCK = "SELECT pg_advisory_xact_lock($1, 0)"
SYNC_LOCK_NAMESPACE = 0x61637364  # 'acsd'

# Who may change a schedule's pause state: a sync holds this from before it reads the
# definitions until its schedules are applied (a session lock, since the apply runs after
# the commit); an operator's pause or resume takes it for its transaction
# (temporal/pause.py). So a pause never lands between a sync's read of the database and its
# apply, which would unpause the schedule of a definition the database says is paused.
# $1 = SYNC_LOCK_NAMESPACE
SCHEDULES_LOCK = "SELECT pg_advisory_lock($1, 1)"
SCHEDULES_UNLOCK = "SELECT pg_advisory_unlock($1, 1)"

# Every stored definition, locked: the sync decides create/update/unchanged/retire
# against this snapshot, and nobody changes a row between the decision and the write.
DEFINITIONS_FOR_SYNC = """
SELECT id, slug, content_digest, paused, removed_at, paused_by
FROM activity_definitions
ORDER BY slug
FOR UPDATE
"""

# $1 id, $2 slug, $3 title, $4 definition, $5 cron, $6 timezone, $7 paused, $8 digest
INSERT_DEFINITION = """
INSERT INTO activity_definitions (
    id, slug, title, definition, schedule_cron, schedule_timezone, paused, content_digest
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
"""

# A changed file, or a retired one that came back. An operator's pause (paused_by) outlives
# the file: only the operator's resume lifts it. $1 id, then as INSERT_DEFINITION.
UPDATE_DEFINITION = """
UPDATE activity_definitions
SET title = $3,
    definition = $4,
    schedule_cron = $5,
    schedule_timezone = $6,
    paused = ($7 OR paused_by IS NOT NULL),
    content_digest = $8,
    removed_at = NULL,
    updated_at = now()
WHERE id = $1 AND slug = $2
"""

# A definition whose file is no longer in the synced set: paused and marked, never
# deleted (ops_runs, activity_runs and the audit log reference it). $1 id
RETIRE_DEFINITION = """
UPDATE activity_definitions
SET paused = true, removed_at = now(), updated_at = now()
WHERE id = $1 AND removed_at IS NULL
"""
