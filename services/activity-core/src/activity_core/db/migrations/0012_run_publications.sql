-- 0012: an operator's publication of a run's changes (docs/changes.md, Publication).
-- Forward-only, like 0001.

-- One row per run: the run's current attempt's changes, pushed by PublishChangesWorkflow
-- (activity-core's Temporal worker) to `refs/heads/rein/<run>/<attempt>` on the remote,
-- create-only, and the pull request opened for it. Only a succeeded run is published,
-- and a succeeded run never changes attempt again, so the run is the key.
--   pending:   an operator asked (requested_by, requested_at); the workflow runs
--   published: the ref is on the remote at `commit` (the run's head_after); `error` set
--              when the pull request could not be opened (the branch is there anyway)
--   failed:    `error` says why; nothing was overwritten; publishing again starts anew
CREATE TABLE ops_run_publications (
    run_id uuid PRIMARY KEY REFERENCES ops_runs (id),
    attempt integer NOT NULL CHECK (attempt >= 1),
    state text NOT NULL CHECK (state IN ('pending', 'published', 'failed')),
    ref text NOT NULL,
    commit text CHECK (commit ~ '^([0-9a-f]{40}|[0-9a-f]{64})$'),
    pull_request_url text,
    error text,
    requested_by text NOT NULL,
    requested_at timestamptz NOT NULL,
    published_at timestamptz,
    workflow_id text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((state = 'published') = (commit IS NOT NULL AND published_at IS NOT NULL)),
    -- a published row may carry an error too: its pull request could not be opened
    CHECK (state <> 'failed' OR error IS NOT NULL)
);
