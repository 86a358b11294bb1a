"""Every SQL statement of emission, in one place. Parameters are `$n` only.

Emission is two units of work. `emit_tasks` writes a fire's ops runs and audit rows in one
transaction (these statements, in order: lock the keys, then per item insert the run,
look it up when it existed, insert the audit row; then mark the fire emitted and count
the sink writes left). `publish_pending` then writes the IssueSink, one audit row at a
time, each write recorded in a statement of its own.
"""

from __future__ import annotations

__all__ = [
    "CREATED_AUDIT_EXISTS",
    "DEFINITION_EXISTS",
    "EMIT_LOCK_NAMESPACE",
    "FIRE_SINK_WRITES_LEFT",
    "INSERT_AUDIT",
    "INSERT_OPS_RUN",
    "LOCK_KEYS",
    "MARK_FIRE_EMITTED",
    "RUN_BY_KEY",
    "SINK_GIVE_UP",
    "SINK_NOT_YET",
    "SINK_REFUSED",
    "SINK_STILL_OWED",
    "SINK_TAKE_WRITES_OF_FIRE",
    "SINK_TOTALS",
    "SINK_WRITES_LEFT",
    "SINK_WRITTEN",
]

# Emission refuses a definition that was never synced (ops_runs reference its row).
DEFINITION_EXISTS = "SELECT EXISTS (SELECT 1 FROM activity_definitions WHERE id = $1)"

# Emits of one idempotency key are serialized for their whole transaction, so exactly one
# of them writes `created` and the others see it committed and write `duplicate`. Every
# key of the batch is locked up front, in hash order, so two batches sharing keys (a
# replayed fire and its original) take their locks in the same order and cannot deadlock;
# the transaction's end releases them. Two-key form: its own lock space.
# $1 namespace, $2 the batch's keys
LOCK_KEYS = """
SELECT pg_advisory_xact_lock($1, h)
FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k ORDER BY 1) AS keys
"""
EMIT_LOCK_NAMESPACE = 0x61636B65  # 'acke'

# The run, open, unless its key exists (then ops_runs_fixed_columns_on_insert, 0009,
# skips the row and RETURNING answers none). Fires ops_runs_notify_open, whose NOTIFY
# wakes long-poll claimers (delivered when the transaction commits). $1 id, $2 definition, $3 key,
# $4 target_repo, $5 title, $6 description, $7 labels, $8 priority, $9 source_type,
# $10 source_id, $11 triggering_event_id, $12 approach_hint, $13 harness_profile_ref,
# $14 execution_refs, $15 repository_grant
INSERT_OPS_RUN = """
INSERT INTO ops_runs (
    id, activity_definition_id, idempotency_key, target_repo, title, description, labels,
    priority, state, source_type, source_id, triggering_event_id, approach_hint,
    harness_profile_ref, execution_refs, repository_grant
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'open', $9, $10, $11, $12, $13, $14, $15)
RETURNING id
"""

RUN_BY_KEY = "SELECT id FROM ops_run_keys WHERE idempotency_key = $1"

# Whether an earlier emit of this key completed (wrote its `created` audit row). A run
# without one was inserted by an emit of an older build that then failed at the sink:
# this emit completes it.
CREATED_AUDIT_EXISTS = """
SELECT EXISTS (
    SELECT 1 FROM task_spawn_log WHERE idempotency_key = $1 AND outcome = 'created'
)
"""

# $1 definition, $2 activity run, $3 source_type, $4 source_id, $5 triggering_event_id,
# $6 key, $7 ops run, $8 outcome, $9 sink name, $10 sink status, $11 sink payload
INSERT_AUDIT = """
INSERT INTO task_spawn_log (
    activity_definition_id, activity_run_id, source_type, source_id, triggering_event_id,
    idempotency_key, ops_run_id, outcome, issue_sink, sink_status, sink_payload
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
"""

# In the emission's transaction: the fire's ops runs and its being emitted commit together.
# $1 activity run, $2 emitted count
MARK_FIRE_EMITTED = """
UPDATE activity_runs
SET status = 'emitted', emitted_count = $2, finished_at = now(), error = NULL
WHERE id = $1
"""

# Sink writes still to do for these keys: this fire's own, and those an earlier emit of
# the same keys left pending or failed (a replay or a retried fire writes them again).
# $1 keys
SINK_WRITES_LEFT = """
SELECT count(*)
FROM task_spawn_log
WHERE idempotency_key = ANY($1::text[]) AND sink_status IN ('pending', 'failed')
"""

# The same count for a fire that emitted already, by the keys its audit rows name (what
# `publish_pending` takes). $1 activity run
FIRE_SINK_WRITES_LEFT = """
SELECT count(*)
FROM task_spawn_log t
WHERE t.idempotency_key IN (
        SELECT idempotency_key FROM task_spawn_log WHERE activity_run_id = $1
      )
  AND t.sink_status IN ('pending', 'failed')
"""

# The writes a fire owes (pending or failed, of every key its audit rows name), locked in
# id order: the take and the give-up lock them alike, so two tries of fires that share keys
# wait for each other, never deadlock. $1 activity run
_OWED_WRITES_OF_FIRE = """WITH owed AS (
    SELECT t.id
    FROM task_spawn_log t
    WHERE t.idempotency_key IN (
            SELECT idempotency_key FROM task_spawn_log WHERE activity_run_id = $1
          )
      AND t.sink_status IN ('pending', 'failed')
    ORDER BY t.id
    FOR UPDATE
)"""

# The writes `publish_pending` does for one fire: every pending or failed write of a key
# the fire's audit rows name, oldest first, taken for this try (migration 0010): a try
# that took them before stops at its next attempt. $1 activity run, $2 the try's token
SINK_TAKE_WRITES_OF_FIRE = f"""
{_OWED_WRITES_OF_FIRE},
taken AS (
    UPDATE task_spawn_log t
    SET sink_sender = $2
    FROM owed
    WHERE t.id = owed.id
    RETURNING t.id, t.idempotency_key, t.sink_payload
)
SELECT id, idempotency_key, sink_payload FROM taken ORDER BY id
"""

# Asked before every attempt at a write: is it still owed, and still this try's?
# $1 audit row, $2 the try's token
SINK_STILL_OWED = """
SELECT EXISTS (
    SELECT 1 FROM task_spawn_log
    WHERE id = $1 AND sink_sender = $2 AND sink_status IN ('pending', 'failed')
)
"""

# The sink accepted the task: the payload is no longer needed. $1 audit row, $2 sink ref
SINK_WRITTEN = """
UPDATE task_spawn_log
SET sink_status = 'written', issue_sink_ref = $2, sink_error = NULL, sink_payload = NULL,
    sink_sender = NULL
WHERE id = $1
"""

# The sink refused the task (a conclusive 4xx): retrying would be refused again.
# $1 audit row, $2 why
SINK_REFUSED = """
UPDATE task_spawn_log
SET sink_status = 'failed', sink_error = $2, sink_sender = NULL
WHERE id = $1 AND sink_status <> 'written'
"""

# The sink is down: the write stays pending (or failed) and says what the last try met,
# unless another try holds it by now. $1 audit row, $2 why, $3 the try's token
SINK_NOT_YET = """
UPDATE task_spawn_log
SET sink_error = $2
WHERE id = $1 AND sink_status IN ('pending', 'failed') AND sink_sender = $3
"""

# The fire's retry window for the sink is over: what is still pending failed, and no try
# holds any of the fire's writes any more (a try Temporal timed out may still be running
# on its worker: it stops at its next attempt). A write the sink accepted meanwhile stays
# written. $1 activity run, $2 why (kept where a try recorded its own reason)
SINK_GIVE_UP = f"""
{_OWED_WRITES_OF_FIRE}
UPDATE task_spawn_log t
SET sink_status = 'failed', sink_error = COALESCE(t.sink_error, $2), sink_sender = NULL
FROM owed
WHERE t.id = owed.id
"""

# $1 activity run: (written, failed) over the fire's keys, after its sink step
SINK_TOTALS = """
SELECT count(*) FILTER (WHERE t.sink_status = 'written') AS written,
       count(*) FILTER (WHERE t.sink_status = 'failed') AS failed
FROM task_spawn_log t
WHERE t.idempotency_key IN (
        SELECT idempotency_key FROM task_spawn_log WHERE activity_run_id = $1
      )
  AND t.sink_status <> 'none'
"""
