UPDATE ops_runs AS r
SET state = 'open', claim_owner = NULL, lease_until = NULL, attempt = r.attempt - 1,
    updated_at = now()
FROM unnest($1::uuid[], $3::int[]) AS u(id, attempt)
WHERE r.id = u.id AND r.state = 'claimed' AND r.claim_owner = $2 AND r.attempt = u.attempt
RETURNING r.id
