"""Every SQL statement of emission, in one place. Parameters are `$n` only."""

from __future__ import annotations

# Emission refuses a definition that was never synced (ops_runs reference its row).
DEFINITION_EXISTS = "SELECT EXISTS (SELECT 1 FROM activity_definitions WHERE id = $1)"

# Emits of one idempotency key are serialized for the whole insert -> sink -> audit
# sequence, so exactly one of them writes `created` and the others see it and write
# `duplicate`. A session lock (not a transaction lock) because the insert must commit
# before the sink is called: a sink failure leaves the run queued, and the retry finds it.
# Two-key form: its own lock space, apart from single-key locks. $1 namespace, $2 key
LOCK_KEY = "SELECT pg_advisory_lock($1, hashtext($2))"
UNLOCK_KEY = "SELECT pg_advisory_unlock($1, hashtext($2))"
EMIT_LOCK_NAMESPACE = 0x61636B65  # 'acke'

# The run, open, unless its key exists. Fires ops_runs_open_after_insert, whose NOTIFY wakes
# long-poll claimers. $1 id, $2 definition, $3 key, $4 target_repo, $5 title,
# $6 description, $7 labels, $8 priority, $9 source_type, $10 source_id,
# $11 triggering_event_id, $12 approach_hint, $13 harness_profile_ref, $14 execution_refs,
# $15 repository_grant
INSERT_OPS_RUN = """
INSERT INTO ops_runs (
    id, activity_definition_id, idempotency_key, target_repo, title, description, labels,
    priority, state, source_type, source_id, triggering_event_id, approach_hint,
    harness_profile_ref, execution_refs, repository_grant
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'open', $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id
"""

RUN_BY_KEY = "SELECT id FROM ops_runs WHERE idempotency_key = $1"

# Whether an earlier emit of this key completed (wrote its `created` audit row). A run
# without one was inserted by an emit that then failed at the sink: this emit completes it.
CREATED_AUDIT_EXISTS = """
SELECT EXISTS (
    SELECT 1 FROM task_spawn_log WHERE idempotency_key = $1 AND outcome = 'created'
)
"""

# $1 definition, $2 activity run, $3 source_type, $4 source_id, $5 triggering_event_id,
# $6 key, $7 ops run, $8 outcome, $9 sink name, $10 sink ref
INSERT_AUDIT = """
INSERT INTO task_spawn_log (
    activity_definition_id, activity_run_id, source_type, source_id, triggering_event_id,
    idempotency_key, ops_run_id, outcome, issue_sink, issue_sink_ref
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
"""
