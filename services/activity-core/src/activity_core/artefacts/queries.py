"""Every SQL statement of the run-artefact views, in one place. `$n` parameters only.

All reads; the service runs each view in one read-only REPEATABLE READ transaction so a
page of fires and the ops runs joined to them come from one snapshot.
"""

from __future__ import annotations

__all__ = ["AUTOMATIONS", "DEFINITION", "FIRE", "FIRES_PAGE", "FIRE_OPS_RUNS", "FIRE_SINK_WRITES"]

# An automation by its UUID or its slug. $1 uuid (NULL when the reference is not one),
# $2 slug
DEFINITION = """
SELECT id, slug, title, schedule_cron, schedule_timezone, paused
FROM activity_definitions
WHERE id = $1::uuid OR slug = $2
ORDER BY (id = $1::uuid) DESC NULLS LAST
LIMIT 1
"""

# The index: every automation with its latest fire and its ops runs counted by state.
# Both laterals are per definition: the last fire walks activity_runs_by_definition
# backwards one row; the counts read ops_run_keys_by_definition and each run's state.
AUTOMATIONS = """
SELECT d.id, d.slug, d.title, d.schedule_cron, d.schedule_timezone, d.paused,
       last.id AS last_id, last.run_id AS last_run_id, last.status AS last_status,
       last.started_at AS last_started_at, last.finished_at AS last_finished_at,
       last.scheduled_for AS last_scheduled_for, last.error AS last_error,
       COALESCE(counts.by_state, '{}'::jsonb) AS queue_counts
FROM activity_definitions d
LEFT JOIN LATERAL (
    SELECT a.id, a.run_id, a.status, a.started_at, a.finished_at, a.scheduled_for, a.error
    FROM activity_runs a
    WHERE a.activity_definition_id = d.id
    ORDER BY a.started_at DESC, a.id DESC
    LIMIT 1
) last ON true
LEFT JOIN LATERAL (
    SELECT jsonb_object_agg(s.state, s.n) AS by_state
    FROM (
        SELECT o.state, count(*) AS n
        FROM ops_run_keys k
        JOIN ops_runs o ON o.id = k.id
        WHERE k.activity_definition_id = d.id
        GROUP BY o.state
    ) s
) counts ON true
ORDER BY d.title, d.slug
"""

_FIRE_COLUMNS = """
    id, run_id, workflow_id, trigger_key, triggering_event_id, scheduled_for, status,
    error, retry_of, emitted_count, started_at, finished_at
"""

# One page of an automation's fires, newest first, keyset on (started_at, id).
# $1 definition id, $2/$3 the cursor's (started_at, id) or NULL for the first page,
# $4 limit
FIRES_PAGE = f"""
SELECT {_FIRE_COLUMNS}
FROM activity_runs
WHERE activity_definition_id = $1
  AND ($2::timestamptz IS NULL OR (started_at, id) < ($2::timestamptz, $3::uuid))
ORDER BY started_at DESC, id DESC
LIMIT $4
"""

# One fire of an automation by its run id (the Temporal run id) or its own UUID.
# $1 definition id, $2 run id text, $3 uuid or NULL
FIRE = f"""
SELECT {_FIRE_COLUMNS}
FROM activity_runs
WHERE activity_definition_id = $1 AND (run_id = $2 OR id = $3::uuid)
ORDER BY (run_id = $2) DESC
LIMIT 1
"""

# The ops runs of some fires of one automation, by these rules, in this order:
#
#   run_id            ops_runs.triggering_event_id = the fire's run id
#   triggering_event  ... = the per-fire triggering event id the fire recorded
#                     (e.g. `scheduled:{iso}`); never the bare legacy sentinel `scheduled`,
#                     which every fire of the old bug shared
#   contains          ... contains the fire's run id (e.g. `manual:{run_id}`); run ids
#                     shorter than 8 characters are not searched for, they would match by
#                     accident
#   time_window       only for a fire that none of the above matched: ops runs created
#                     from the fire's started_at to its finished_at (or started_at + $3
#                     seconds while unfinished), never past the next fire's start, and
#                     not keyed to any fire of this automation by the rules above
#
# Every branch is confined to the automation ($1), so runs of another automation never
# appear, however their keys look. The matching reads ops_run_keys (0009), which holds
# every column it compares: the exact branches use ops_run_keys_by_trigger; `contains`
# and the window read the automation's runs through ops_run_keys_by_definition.
# Each fire shows at most $4 ops runs, oldest first.
# $1 definition id, $2 activity_runs.id[] of the fires, $3 open-fire window seconds,
# $4 per-fire limit
FIRE_OPS_RUNS = """
WITH fire AS (
    SELECT a.id, a.run_id, a.started_at,
           NULLIF(a.triggering_event_id, 'scheduled') AS event_key,
           LEAST(
               COALESCE(a.finished_at, a.started_at + make_interval(secs => $3::double precision)),
               COALESCE(nxt.started_at, 'infinity'::timestamptz)
           ) AS window_end
    FROM activity_runs a
    LEFT JOIN LATERAL (
        SELECT n.started_at
        FROM activity_runs n
        WHERE n.activity_definition_id = a.activity_definition_id
          AND (n.started_at, n.id) > (a.started_at, a.id)
        ORDER BY n.started_at, n.id
        LIMIT 1
    ) nxt ON true
    WHERE a.activity_definition_id = $1 AND a.id = ANY($2::uuid[])
),
keyed AS (
    SELECT f.id AS fire_id, o.id AS ops_run_id,
           CASE WHEN o.triggering_event_id = f.run_id THEN 'run_id'
                ELSE 'triggering_event' END AS matched_by
    FROM fire f
    JOIN ops_run_keys o
      ON o.activity_definition_id = $1
     AND (o.triggering_event_id = f.run_id OR o.triggering_event_id = f.event_key)
    UNION
    SELECT f.id, o.id, 'contains'
    FROM fire f
    JOIN ops_run_keys o
      ON o.activity_definition_id = $1
     AND length(f.run_id) >= 8
     AND o.triggering_event_id <> f.run_id
     AND o.triggering_event_id IS DISTINCT FROM f.event_key
     AND strpos(o.triggering_event_id, f.run_id) > 0
),
windowed AS (
    SELECT f.id AS fire_id, o.id AS ops_run_id, 'time_window' AS matched_by
    FROM fire f
    JOIN ops_run_keys o
      ON o.activity_definition_id = $1
     AND o.created_at >= f.started_at
     AND o.created_at <= f.window_end
    WHERE NOT EXISTS (SELECT 1 FROM keyed k WHERE k.fire_id = f.id)
      -- a run keyed to some fire of this automation belongs to that fire alone
      AND NOT EXISTS (
          SELECT 1
          FROM activity_runs other
          WHERE other.activity_definition_id = $1
            AND (
                o.triggering_event_id = other.run_id
                OR o.triggering_event_id = NULLIF(other.triggering_event_id, 'scheduled')
                OR (length(other.run_id) >= 8 AND strpos(o.triggering_event_id, other.run_id) > 0)
            )
      )
),
matched AS (
    SELECT fire_id, ops_run_id, matched_by FROM keyed
    UNION ALL
    SELECT fire_id, ops_run_id, matched_by FROM windowed
),
ranked AS (
    SELECT m.fire_id, m.matched_by, o.id, o.title, o.target_repo, o.state, o.attempt,
           o.claim_owner, o.lease_until, o.priority, o.labels, o.last_error,
           o.harness_profile_ref, o.triggering_event_id, o.result, o.created_at, o.updated_at,
           row_number() OVER (PARTITION BY m.fire_id ORDER BY o.created_at, o.id) AS n
    FROM matched m
    JOIN ops_runs o ON o.id = m.ops_run_id
)
-- links tell the truth (artefacts/links.py): the published commit, if any, and whether
-- the run's current attempt has stored changes to link into
SELECT r.fire_id, r.matched_by, r.id, r.title, r.target_repo, r.state, r.attempt,
       r.claim_owner, r.lease_until, r.priority, r.labels, r.last_error,
       r.harness_profile_ref, r.triggering_event_id, r.result, r.created_at, r.updated_at, r.n,
       p.commit AS published_commit,
       EXISTS (SELECT 1 FROM ops_run_changes c
               WHERE c.run_id = r.id AND c.attempt = r.attempt) AS has_changes
FROM ranked r
LEFT JOIN ops_run_publications p ON p.run_id = r.id AND p.state = 'published'
WHERE r.n <= $4
ORDER BY r.fire_id, r.created_at, r.id
"""

# The IssueSink writes of some fires, counted by state. A write belongs to an idempotency
# key: a fire's own audit rows name its keys, and a replayed or retried fire (whose rows
# are `duplicate`, owing no write) shows the writes of the emit that created its runs. Per
# key the best state counts (written, else pending, else failed), so a key written twice
# (the queue disabled, fired twice) is one write. task_spawn_log_by_run finds the fires'
# keys, task_spawn_log_by_key their writes.
# $1 activity_runs.id[] of the fires
FIRE_SINK_WRITES = """
WITH fire_keys AS (
    SELECT DISTINCT activity_run_id AS fire_id, idempotency_key
    FROM task_spawn_log
    WHERE activity_run_id = ANY($1::uuid[])
),
per_key AS (
    SELECT k.fire_id,
           CASE WHEN bool_or(t.sink_status = 'written') THEN 'written'
                WHEN bool_or(t.sink_status = 'pending') THEN 'pending'
                ELSE 'failed' END AS state,
           (array_agg(t.sink_error ORDER BY t.id DESC)
                FILTER (WHERE t.sink_error IS NOT NULL))[1] AS error
    FROM fire_keys k
    JOIN task_spawn_log t
      ON t.idempotency_key = k.idempotency_key AND t.sink_status <> 'none'
    GROUP BY k.fire_id, k.idempotency_key
)
SELECT fire_id, state, count(*) AS n,
       (array_agg(error) FILTER (WHERE error IS NOT NULL AND state <> 'written'))[1] AS error
FROM per_key
GROUP BY fire_id, state
"""
