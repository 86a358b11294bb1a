"""The SQL of the Temporal context: activity runs and the definition lookups they need.

Parameters are `$n` only. Transactions belong to the activity (the unit of work).
"""

from __future__ import annotations

__all__ = [
    "ACTIVITY_RUN_FOR_EMIT",
    "DEFINITION_BY_ID",
    "DEFINITION_BY_SLUG",
    "FIRE_TO_RETRY",
    "MARK_FAILED",
    "NOTE_RETRY",
    "RECORD_ACTIVITY_RUN",
]

# A definition by its stable slug (the schedule's workflow input names the slug).
DEFINITION_BY_SLUG = """
SELECT id, slug, definition, paused
FROM activity_definitions
WHERE slug = $1
"""

# A definition by its UUID or its slug: the manual-fire path accepts either in the URL.
DEFINITION_BY_ID = """
SELECT id, slug, paused
FROM activity_definitions
WHERE id = $1
"""

# Idempotent on the Temporal run id: an activity retry (or a replayed record after a worker
# crash) answers the row the first attempt wrote. DO UPDATE with a no-op assignment, rather
# than DO NOTHING, so RETURNING yields the existing row's id in the same statement even when
# the conflicting row was committed after this statement's snapshot was taken.
# $1 id, $2 definition, $3 workflow id, $4 run id, $5 trigger key, $6 triggering event,
# $7 scheduled for, $8 context, $9 started at, $10 the run id of the fire it retries
RECORD_ACTIVITY_RUN = """
INSERT INTO activity_runs (
    id, activity_definition_id, workflow_id, run_id, trigger_key,
    triggering_event_id, scheduled_for, context, started_at, retry_of
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (run_id) DO UPDATE SET run_id = activity_runs.run_id
RETURNING id, triggering_event_id
"""

# What the emit activity needs: the run (and whether it emitted already) and its
# definition, in one read.
ACTIVITY_RUN_FOR_EMIT = """
SELECT r.id, r.run_id, r.trigger_key, r.triggering_event_id, r.scheduled_for,
       r.started_at, r.context, r.status, r.emitted_count, d.slug, d.definition, d.paused
FROM activity_runs r
JOIN activity_definitions d ON d.id = r.activity_definition_id
WHERE r.id = $1
"""

# (A fire is marked emitted by emission, in the transaction that writes its ops runs.)

# A run that already emitted stays emitted: a late failure report must not rewrite it.
# $1 activity run, $2 why
MARK_FAILED = """
UPDATE activity_runs
SET status = 'failed', finished_at = now(), error = $2
WHERE id = $1 AND status <> 'emitted'
"""

# What a fire that is still retrying its emission last met. $1 activity run, $2 the note
NOTE_RETRY = """
UPDATE activity_runs
SET error = $2
WHERE id = $1 AND status = 'started'
"""

# A fire to retry, by its run id (the Temporal run id) or its own UUID, within one
# automation. $1 definition id, $2 run id text, $3 uuid or NULL
FIRE_TO_RETRY = """
SELECT run_id, trigger_key, triggering_event_id, scheduled_for, context, status
FROM activity_runs
WHERE activity_definition_id = $1 AND (run_id = $2 OR id = $3::uuid)
ORDER BY (run_id = $2) DESC
LIMIT 1
"""
