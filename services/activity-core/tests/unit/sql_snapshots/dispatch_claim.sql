WITH leased AS (
WITH claimers AS (
    SELECT c.worker_id, c.lease_seconds, c.n
    FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS c(worker_id, lease_seconds, n)
),
picked AS (
    SELECT p.id, row_number() OVER (ORDER BY p.priority_rank, p.created_at, p.id) AS k
    FROM (
        SELECT id, priority_rank, created_at
    FROM ops_runs
    WHERE state = 'open'
      AND (SELECT stale.lease_until
           FROM ops_runs AS stale
           WHERE stale.state = 'claimed' AND stale.lease_until <= now()
           ORDER BY stale.lease_until
           LIMIT 1) IS NULL
      AND CASE $4::text
            WHEN 'any' THEN labels ?| $5::text[]
            WHEN 'all' THEN labels @> to_jsonb($5::text[])
            ELSE true
          END
    ORDER BY priority_rank, created_at, id
    LIMIT $3::int * cardinality($1::text[])
    FOR NO KEY UPDATE SKIP LOCKED

    ) AS p
)
UPDATE ops_runs AS r
SET state = 'claimed',
    claim_owner = c.worker_id,
    lease_until = now() + make_interval(secs => c.lease_seconds),
    attempt = r.attempt + 1,
    updated_at = now()
FROM picked
JOIN claimers AS c ON c.n = (picked.k - 1) / $3::int + 1
WHERE r.id = picked.id
RETURNING c.n AS claimer, picked.k AS claim_rank, r.id, r.activity_definition_id, r.idempotency_key, r.target_repo, r.title, r.description, r.labels, r.priority, r.state, r.claim_owner, r.lease_until, r.attempt, r.source_type, r.source_id, r.triggering_event_id, r.approach_hint, r.harness_profile_ref, r.execution_refs, r.repository_grant, r.result, r.last_error, r.created_at, r.updated_at, r.requeued_from, r.cancelled_by
)
SELECT * FROM leased
UNION ALL
SELECT 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM leased)
  AND EXISTS (SELECT 1
              FROM ops_runs AS stale
              WHERE stale.state = 'claimed' AND stale.lease_until <= now())
