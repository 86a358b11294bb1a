"""The bench's own statements; the queue's are activity_core.queue.queries, used as they are.

Seeding and checks of the real schema, the minimal queue table that (a-ref) measures, and
what the CPU probe reads. Parameters are `$n`; nothing is formatted into a statement.
"""

from __future__ import annotations

__all__ = [
    "BACKEND_PIDS",
    "CHECK_RUNS",
    "MINIMAL_CLAIM",
    "MINIMAL_COMPLETE",
    "MINIMAL_SCHEMA",
    "SEED_DEFINITION",
    "SEED_MINIMAL",
    "SEED_RUNS",
    "TABLE_STATS",
]

SEED_DEFINITION = """
INSERT INTO activity_definitions (id, slug, title, definition, content_digest)
VALUES ($1, 'bench-activity', 'Benchmark activity', '{}'::jsonb, 'bench')
ON CONFLICT (id) DO NOTHING
"""

# One statement per chunk: $3..$5 number the rows; created_at spaced 1 ms apart from $4 so
# claim order is well defined; priorities 10% high, 80% medium, 10% low.
SEED_RUNS = """
INSERT INTO ops_runs (
    id, activity_definition_id, idempotency_key, target_repo, title, description, labels,
    priority, source_type, source_id, triggering_event_id, harness_profile_ref,
    created_at, updated_at
)
SELECT gen_random_uuid(), $1, 'bench-activity:rule:' || $2 || ':' || g, 'research/briefs',
       'bench run ' || g, 'seeded by bench/claim_throughput.py', '["automated"]'::jsonb,
       CASE g % 10 WHEN 0 THEN 'high' WHEN 9 THEN 'low' ELSE 'medium' END,
       'rule', 'bench-rule', 'scheduled:bench-' || (g / 1000), 'harness.agent-dev@1.0.0',
       $4::timestamptz + g * interval '1 millisecond',
       $4::timestamptz + g * interval '1 millisecond'
FROM generate_series($3::bigint, $5::bigint) AS g
"""

# The textbook queue, for (a-ref): what the real schema's claim costs beyond it.
MINIMAL_SCHEMA = """
CREATE TABLE bench_minimal_queue (
    id uuid PRIMARY KEY,
    state text NOT NULL,
    priority smallint NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX bench_minimal_queue_open ON bench_minimal_queue (priority, created_at, id)
    WHERE state = 'open';
"""

SEED_MINIMAL = """
INSERT INTO bench_minimal_queue (id, state, priority, created_at)
SELECT gen_random_uuid(), 'open', CASE g % 10 WHEN 0 THEN 0 WHEN 9 THEN 2 ELSE 1 END,
       $1::timestamptz + g * interval '1 millisecond'
FROM generate_series(1, $2::bigint) AS g
"""

MINIMAL_CLAIM = """
WITH picked AS (
    SELECT id FROM bench_minimal_queue
    WHERE state = 'open'
    ORDER BY priority, created_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE bench_minimal_queue AS q SET state = 'claimed'
FROM picked WHERE q.id = picked.id
RETURNING q.id
"""

MINIMAL_COMPLETE = (
    "UPDATE bench_minimal_queue SET state = 'done' WHERE id = $1 AND state = 'claimed'"
)

CHECK_RUNS = """
SELECT count(*) FILTER (WHERE attempt > 1) AS reclaimed,
       count(*) FILTER (WHERE state = 'claimed') AS still_claimed,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'open') AS open
FROM ops_runs
"""

TABLE_STATS = """
SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, vacuum_count,
       pg_total_relation_size('ops_runs') AS total_bytes,
       pg_relation_size('ops_runs') AS heap_bytes,
       pg_relation_size('ops_runs_open_claim_order') AS claim_index_bytes
FROM pg_stat_user_tables WHERE relname = 'ops_runs'
"""

# Our PostgreSQL backends, for the CPU probe (all but the probe's own connection).
BACKEND_PIDS = "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()"
