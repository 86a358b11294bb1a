-- 0001: the claim queue and the emission bookkeeping it hangs off.
-- Forward-only: a later change is a new file, never an edit of this one
-- (the migration runner refuses a checksum change of an applied file).

CREATE TABLE activity_definitions (
    id uuid PRIMARY KEY,
    -- the stable slug from the YAML file; the UUID is derived from it
    slug text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9._-]{0,127}$'),
    title text NOT NULL,
    definition jsonb NOT NULL,
    schedule_cron text,
    schedule_timezone text,
    paused boolean NOT NULL DEFAULT false,
    content_digest text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE activity_runs (
    id uuid PRIMARY KEY,
    activity_definition_id uuid NOT NULL REFERENCES activity_definitions (id),
    workflow_id text NOT NULL,
    -- the Temporal run id; ops_runs.triggering_event_id refers to it (or to scheduled:{iso})
    run_id text NOT NULL UNIQUE,
    trigger_key text NOT NULL,
    triggering_event_id text NOT NULL,
    scheduled_for timestamptz,
    context jsonb NOT NULL DEFAULT '{}'::jsonb,
    status text NOT NULL DEFAULT 'started'
        CHECK (status IN ('started', 'emitted', 'failed')),
    emitted_count integer NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX activity_runs_by_definition ON activity_runs (activity_definition_id, started_at DESC);

CREATE TABLE ops_runs (
    id uuid PRIMARY KEY,
    activity_definition_id uuid NOT NULL REFERENCES activity_definitions (id),
    idempotency_key text NOT NULL UNIQUE,
    target_repo text NOT NULL,
    title text NOT NULL,
    description text NOT NULL DEFAULT '',
    labels jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(labels) = 'array'),
    priority text NOT NULL DEFAULT 'medium' CHECK (priority IN ('low', 'medium', 'high')),
    -- claim order is high -> medium -> low; a stored rank lets one btree serve ORDER BY
    priority_rank smallint GENERATED ALWAYS AS (
        CASE priority WHEN 'high' THEN 0 WHEN 'medium' THEN 1 ELSE 2 END
    ) STORED,
    state text NOT NULL DEFAULT 'open'
        CHECK (state IN ('open', 'claimed', 'succeeded', 'failed', 'expired')),
    claim_owner text,
    lease_until timestamptz,
    attempt integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    source_type text NOT NULL CHECK (source_type IN ('rule', 'instruction')),
    source_id text NOT NULL,
    triggering_event_id text NOT NULL,
    approach_hint text,
    harness_profile_ref text,
    execution_refs jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(execution_refs) = 'object'),
    repository_grant jsonb CHECK (repository_grant IS NULL OR jsonb_typeof(repository_grant) = 'object'),
    result jsonb,
    last_error text,
    close_intent_digest text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- a claimed row always has an owner and a lease; an open row has neither
    CONSTRAINT ops_runs_claim_shape CHECK (
        (state = 'claimed' AND claim_owner IS NOT NULL AND lease_until IS NOT NULL)
        OR (state = 'open' AND claim_owner IS NULL AND lease_until IS NULL)
        OR (state IN ('succeeded', 'failed', 'expired') AND lease_until IS NULL)
    )
);

-- The claim path: only open rows, in claim order. Partial, so its size tracks the backlog,
-- not the history, and the first rows of an index scan are the ones a claim wants.
CREATE INDEX ops_runs_open_claim_order ON ops_runs (priority_rank, created_at, id)
    WHERE state = 'open';
-- Stale-claim reclaim and expire-leases: only claimed rows, by lease end.
CREATE INDEX ops_runs_claimed_lease ON ops_runs (lease_until) WHERE state = 'claimed';
-- Label filters (`?|` for any, `@>` for all) on open rows.
CREATE INDEX ops_runs_open_labels ON ops_runs USING gin (labels) WHERE state = 'open';
-- Operator listing: keyset pagination newest first, and its filters.
CREATE INDEX ops_runs_listing ON ops_runs (created_at DESC, id DESC);
CREATE INDEX ops_runs_by_state ON ops_runs (state, created_at DESC, id DESC);
CREATE INDEX ops_runs_by_definition ON ops_runs (activity_definition_id, created_at DESC, id DESC);
CREATE INDEX ops_runs_by_target_repo ON ops_runs (target_repo, created_at DESC, id DESC);
CREATE INDEX ops_runs_by_trigger ON ops_runs (triggering_event_id);

-- Long-poll claimers LISTEN on this channel; one notification per statement that leaves
-- any row open (emission, reopen on failure, stale reclaim, expire-leases).
CREATE FUNCTION ops_runs_notify_open() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows WHERE state = 'open') THEN
        PERFORM pg_notify('ops_runs_open', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ops_runs_open_after_insert
    AFTER INSERT ON ops_runs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ops_runs_notify_open();

CREATE TRIGGER ops_runs_open_after_update
    AFTER UPDATE ON ops_runs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ops_runs_notify_open();

CREATE TABLE task_spawn_log (
    id bigserial PRIMARY KEY,
    activity_definition_id uuid NOT NULL REFERENCES activity_definitions (id),
    activity_run_id uuid REFERENCES activity_runs (id),
    source_type text NOT NULL CHECK (source_type IN ('rule', 'instruction')),
    source_id text NOT NULL,
    triggering_event_id text NOT NULL,
    idempotency_key text NOT NULL,
    ops_run_id uuid REFERENCES ops_runs (id),
    -- created: a new ops_run; duplicate: the key existed; queue_disabled: OPS_RUN_QUEUE_ENABLED off;
    -- report_only: a deterministic report, no execution request
    outcome text NOT NULL CHECK (outcome IN ('created', 'duplicate', 'queue_disabled', 'report_only')),
    issue_sink text NOT NULL,
    issue_sink_ref text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_spawn_log_by_run ON task_spawn_log (activity_run_id);
CREATE INDEX task_spawn_log_by_key ON task_spawn_log (idempotency_key);
