-- 0006: the operator plane: requeue and cancel of runs, the workers seen by the queue,
-- and the audit trail of operator actions. Forward-only, like 0001.

-- A requeued run's successor names the run it was requeued from. The original row is
-- never written again: its `requeued_as` is computed from this column (a partial index,
-- since only successors have it). The self-reference takes FOR KEY SHARE on the original
-- when a successor is inserted, which no queue lock (FOR NO KEY UPDATE) conflicts with.
ALTER TABLE ops_runs ADD COLUMN requeued_from uuid REFERENCES ops_runs (id);
CREATE INDEX ops_runs_by_requeued_from ON ops_runs (requeued_from)
    WHERE requeued_from IS NOT NULL;

-- The operator who cancelled the run (state failed); NULL for every other run.
ALTER TABLE ops_runs ADD COLUMN cancelled_by text
    CHECK (cancelled_by IS NULL OR state = 'failed');

-- The last claim each worker identity made, as the API processes saw it: kept in memory
-- on the claim path and written here by each process every few seconds (one statement
-- for every identity seen since), never per claim. Several processes write the same
-- identity; the latest claim wins.
CREATE TABLE ops_workers (
    worker_id text PRIMARY KEY,
    last_claim_at timestamptz NOT NULL,
    -- NULL: the claim named no labels (any run)
    labels jsonb CHECK (labels IS NULL OR jsonb_typeof(labels) = 'array'),
    labels_mode text NOT NULL CHECK (labels_mode IN ('any', 'all')),
    claim_limit integer NOT NULL CHECK (claim_limit >= 1),
    first_seen_at timestamptz NOT NULL DEFAULT now()
);

-- Every operator action and every refusal of one: who (the operator's name and role),
-- what, on which target, when, under which request id, and how it ended.
CREATE TABLE ops_audit (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    actor text NOT NULL,
    role text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    request_id text NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('applied', 'repeated', 'refused')),
    code text,
    detail text,
    details jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(details) = 'object'),
    CONSTRAINT ops_audit_refusal_has_code CHECK ((outcome = 'refused') = (code IS NOT NULL))
);
-- The audit listing is newest first (id order), by target or actor, or all.
CREATE INDEX ops_audit_by_target ON ops_audit (target, id DESC);
CREATE INDEX ops_audit_by_actor ON ops_audit (actor, id DESC);
