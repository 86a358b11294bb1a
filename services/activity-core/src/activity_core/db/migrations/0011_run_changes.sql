-- 0011: what a granted run changed, as the worker handed it over. Forward-only, like 0001.

-- One row per (run, attempt): the changes bundle of docs/changes.md that the attempt's
-- worker uploaded (PUT /ops-runs/{id}/changes), checked against the run's grant before
-- it is stored, and the facts derived from it that the close compares with its evidence.
-- The bundle lives here and not in ops_runs.result: it is up to
-- ACTIVITY_CORE_CHANGES_MAX_BYTES, while a result is bounded evidence, and it is read
-- only by the change view and publication. A row is never updated: a second upload of
-- the same attempt is the same digest (idempotent) or refused (changes_conflict).
CREATE TABLE ops_run_changes (
    run_id uuid NOT NULL REFERENCES ops_runs (id),
    attempt integer NOT NULL CHECK (attempt >= 1),
    digest text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    -- the bundle's length in bytes; the API's bound is a setting, so the table only
    -- keeps the size honest
    size integer NOT NULL CHECK (size > 0),
    baseline text NOT NULL CHECK (baseline ~ '^([0-9a-f]{40}|[0-9a-f]{64})$'),
    head_after text NOT NULL CHECK (head_after ~ '^([0-9a-f]{40}|[0-9a-f]{64})$'),
    -- baseline..head_after, oldest first
    commits text[] NOT NULL CHECK (cardinality(commits) >= 1),
    -- every path the commits touched (both sides of a rename), sorted
    paths text[] NOT NULL,
    bundle bytea NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, attempt),
    CHECK (octet_length(bundle) = size)
);
