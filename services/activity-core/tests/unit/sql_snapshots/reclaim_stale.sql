WITH stale AS (
    SELECT id, claim_owner
    FROM ops_runs
    WHERE state = 'claimed' AND lease_until <= now()
    ORDER BY lease_until
    LIMIT 500
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE ops_runs AS r
SET state = CASE WHEN r.attempt >= $1 THEN 'expired' ELSE 'open' END,
    claim_owner = CASE WHEN r.attempt >= $1 THEN r.claim_owner ELSE NULL END,
    lease_until = NULL,
    close_intent_digest = NULL,
    updated_at = now()
FROM stale
WHERE r.id = stale.id
RETURNING r.id, r.state, stale.claim_owner
