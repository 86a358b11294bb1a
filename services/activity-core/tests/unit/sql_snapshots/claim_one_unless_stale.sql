WITH picked AS (
    SELECT id
    FROM ops_runs
    WHERE state = 'open'
      AND (SELECT stale.lease_until
           FROM ops_runs AS stale
           WHERE stale.state = 'claimed' AND stale.lease_until <= now()
           ORDER BY stale.lease_until
           LIMIT 1) IS NULL
      AND CASE $3::text
            WHEN 'any' THEN labels ?| $4::text[]
            WHEN 'all' THEN labels @> to_jsonb($4::text[])
            ELSE true
          END
    ORDER BY priority_rank, created_at, id
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE ops_runs AS r
SET state = 'claimed',
    claim_owner = $1,
    lease_until = now() + make_interval(secs => $2),
    attempt = r.attempt + 1,
    updated_at = now()
FROM picked
WHERE r.id = picked.id
RETURNING r.id, r.activity_definition_id, r.idempotency_key, r.target_repo, r.title, r.description, r.labels, r.priority, r.state, r.claim_owner, r.lease_until, r.attempt, r.source_type, r.source_id, r.triggering_event_id, r.approach_hint, r.harness_profile_ref, r.execution_refs, r.repository_grant, r.result, r.last_error, r.created_at, r.updated_at, r.requeued_from, r.cancelled_by
