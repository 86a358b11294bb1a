"""The SQL of an operator's pause and resume (pause.py). Parameters are `$n` only.

A pause or resume is one transaction: set a bounded lock timeout, take the schedules lock
(definitions/queries.SCHEDULES_LOCK: a running sync finishes applying its schedules
first), lock the definition's row, change it, change the Temporal Schedule, commit. A
Temporal failure rolls the row back, so the database never claims a pause Temporal lacks.
"""

from __future__ import annotations

__all__ = [
    "AUTOMATION",
    "AUTOMATION_FOR_CHANGE",
    "LOCK_TIMEOUT",
    "PAUSE",
    "RESUME",
    "SCHEDULES_LOCK",
]

# A sync holds the schedules lock while it applies every schedule; past this an operator
# gets a 503 to retry rather than a request that hangs.
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '20s'"

# The same key as definitions/queries.SCHEDULES_LOCK, for the transaction. $1 namespace
SCHEDULES_LOCK = "SELECT pg_advisory_xact_lock($1, 1)"

_COLUMNS = """
    id, slug, title, schedule_cron, schedule_timezone, paused, removed_at IS NOT NULL AS removed,
    paused_by, paused_at, pause_reason,
    COALESCE((definition ->> 'paused')::boolean, false) AS file_paused
"""

# An automation by its UUID or its slug, read for a view. $1 uuid (NULL when the reference
# is not one), $2 slug
AUTOMATION = f"""
SELECT {_COLUMNS}
FROM activity_definitions
WHERE id = $1::uuid OR slug = $2
ORDER BY (id = $1::uuid) DESC NULLS LAST
LIMIT 1
"""

# The same, its row locked for the change. $1 uuid or NULL, $2 slug
AUTOMATION_FOR_CHANGE = AUTOMATION + "FOR UPDATE\n"

# The operator's pause. $1 id, $2 operator, $3 reason (or NULL)
PAUSE = f"""
UPDATE activity_definitions
SET paused = true, paused_by = $2, paused_at = now(), pause_reason = $3
WHERE id = $1
RETURNING {_COLUMNS}
"""

# The operator's resume: run on the row AUTOMATION_FOR_CHANGE locked, only when neither
# the file nor a retirement pauses the definition (pause.py refuses those first), so
# nothing else is left holding it. $1 id
RESUME = f"""
UPDATE activity_definitions
SET paused = false, paused_by = NULL, paused_at = NULL, pause_reason = NULL
WHERE id = $1
RETURNING {_COLUMNS}
"""
