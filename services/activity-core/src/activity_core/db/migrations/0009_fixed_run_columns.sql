-- 0009: a run's fixed columns are indexed and checked where a claim and a close do not
-- pay for them. Forward-only, like 0001.
--
-- Every claim and every close updates one ops_runs row, and what that update costs besides
-- the row itself was mostly for columns it never changes (benchmark, one connection: 0.46
-- ms of server CPU per claim+close cycle against 0.29 for a minimal queue table):
--
-- * Index entries. No update of ops_runs is HOT (`state` is in the predicate of every queue
--   index), so each claim and close wrote an entry into every index whose predicate the new
--   row version meets: the operator's listing indexes and the idempotency key's unique
--   index included, though their columns never change (7 entries and ~7.7 KB of WAL per
--   cycle, against 1 and ~1.5 KB for the minimal table). Their columns stay on ops_runs,
--   where every reader keeps reading them; their indexes move to ops_run_keys, a copy of
--   those columns written once, when the run is inserted, and never updated, so its
--   indexes take one entry per run. A claim now writes ops_runs_pkey and
--   ops_runs_claimed_lease; a close ops_runs_pkey and ops_runs_by_terminal_state.
-- * CHECK constraints. PostgreSQL evaluates every CHECK constraint of a table on every
--   UPDATE, and prepares each one's expression again for every statement (~0.07 ms per
--   cycle for the nine of ops_runs). The checks of columns fixed at insert (labels,
--   priority, source type, execution refs, grant) move to the insert trigger, and such
--   columns cannot change afterwards (a second trigger, which fires only for an UPDATE
--   that names one). The queue columns keep one CHECK constraint: ops_runs_queue_shape.
-- * The generated rank. PostgreSQL (before 18) computes every stored generated column
--   again on every UPDATE of the row, whatever the UPDATE changes: each claim and close
--   computed priority_rank's CASE. A run's priority is now fixed at insert, so its rank
--   is too: priority_rank becomes a plain column the insert trigger sets (overriding any
--   value an INSERT names) and the update trigger keeps. DROP EXPRESSION keeps the stored
--   values and rewrites nothing.
ALTER TABLE ops_runs ALTER COLUMN priority_rank DROP EXPRESSION;
ALTER TABLE ops_runs ALTER COLUMN priority_rank SET NOT NULL;

CREATE TABLE ops_run_keys (
    id uuid PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    activity_definition_id uuid NOT NULL,
    target_repo text NOT NULL,
    triggering_event_id text NOT NULL,
    created_at timestamptz NOT NULL
);

INSERT INTO ops_run_keys (
    id, idempotency_key, activity_definition_id, target_repo, triggering_event_id, created_at
)
SELECT id, idempotency_key, activity_definition_id, target_repo, triggering_event_id,
       created_at
FROM ops_runs;

-- Operator listing: keyset pagination newest first, and its filters; the run artefacts
-- find a fire's runs by their triggering event.
CREATE INDEX ops_run_keys_listing ON ops_run_keys (created_at DESC, id DESC);
CREATE INDEX ops_run_keys_by_definition
    ON ops_run_keys (activity_definition_id, created_at DESC, id DESC);
CREATE INDEX ops_run_keys_by_target_repo ON ops_run_keys (target_repo, created_at DESC, id DESC);
CREATE INDEX ops_run_keys_by_trigger ON ops_run_keys (triggering_event_id);

DROP INDEX ops_runs_listing;
DROP INDEX ops_runs_by_definition;
DROP INDEX ops_runs_by_target_repo;
DROP INDEX ops_runs_by_trigger;
-- The idempotency key is unique through ops_run_keys (the trigger below).
ALTER TABLE ops_runs DROP CONSTRAINT ops_runs_idempotency_key_key;

-- Every run is checked and has its key row. Done by a trigger rather than by each INSERT,
-- so no way of inserting a run (emission, requeue, a migration, a test's fixture) can leave
-- either out. A run whose idempotency key exists already is skipped, silently, as
-- `ON CONFLICT (idempotency_key) DO NOTHING` did: INSERT ... RETURNING answers no row.
-- The key row's own ON CONFLICT waits for a concurrent insert of the same key to commit
-- or abort, as the unique index of ops_runs did. The checks are the CHECK constraints
-- 0001 declared on these columns, with their SQLSTATE (check_violation).
CREATE FUNCTION ops_runs_fixed_columns_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- As a CHECK constraint does, a NULL passes (NOT NULL refuses it after the trigger).
    IF jsonb_typeof(NEW.labels) <> 'array'
       OR NEW.priority NOT IN ('low', 'medium', 'high')
       OR NEW.source_type NOT IN ('rule', 'instruction')
       OR jsonb_typeof(NEW.execution_refs) <> 'object'
       OR jsonb_typeof(NEW.repository_grant) <> 'object' THEN
        RAISE EXCEPTION 'an ops run needs labels as an array, a priority of low, medium or '
            'high, a source type of rule or instruction, execution refs and any repository '
            'grant as objects (run %)', NEW.id
            USING ERRCODE = 'check_violation';
    END IF;
    -- claim order is high -> medium -> low; one btree serves ORDER BY (priority_rank, ...)
    NEW.priority_rank := CASE NEW.priority WHEN 'high' THEN 0 WHEN 'medium' THEN 1 ELSE 2 END;
    INSERT INTO ops_run_keys (
        id, idempotency_key, activity_definition_id, target_repo, triggering_event_id,
        created_at
    )
    VALUES (
        NEW.id, NEW.idempotency_key, NEW.activity_definition_id, NEW.target_repo,
        NEW.triggering_event_id, NEW.created_at
    )
    ON CONFLICT (idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ops_runs_fixed_columns_on_insert
    BEFORE INSERT ON ops_runs
    FOR EACH ROW
    EXECUTE FUNCTION ops_runs_fixed_columns_on_insert();

-- The columns fixed at insert never change; an UPDATE that changes one is refused rather
-- than leaving the copy in ops_run_keys behind or a value the insert checks would refuse.
-- `UPDATE OF`: claims and closes do not name them, so the trigger costs them nothing.
CREATE FUNCTION ops_runs_fixed_columns_unchanged() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.idempotency_key, NEW.activity_definition_id, NEW.target_repo,
        NEW.triggering_event_id, NEW.created_at, NEW.labels, NEW.priority, NEW.priority_rank,
        NEW.source_type, NEW.execution_refs, NEW.repository_grant)
       IS DISTINCT FROM
       (OLD.id, OLD.idempotency_key, OLD.activity_definition_id, OLD.target_repo,
        OLD.triggering_event_id, OLD.created_at, OLD.labels, OLD.priority, OLD.priority_rank,
        OLD.source_type, OLD.execution_refs, OLD.repository_grant) THEN
        RAISE EXCEPTION 'the columns an ops run was inserted with never change (run %)', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ops_runs_fixed_columns_unchanged
    BEFORE UPDATE OF id, idempotency_key, activity_definition_id, target_repo,
        triggering_event_id, created_at, labels, priority, priority_rank, source_type,
        execution_refs, repository_grant ON ops_runs
    FOR EACH ROW
    EXECUTE FUNCTION ops_runs_fixed_columns_unchanged();

-- The queue columns, in one CHECK constraint (one expression to prepare per statement):
-- 0001's claim shape, which also names every state, the attempt count, and 0006's
-- cancellation (only a failed run has a canceller).
ALTER TABLE ops_runs
    DROP CONSTRAINT ops_runs_labels_check,
    DROP CONSTRAINT ops_runs_priority_check,
    DROP CONSTRAINT ops_runs_source_type_check,
    DROP CONSTRAINT ops_runs_execution_refs_check,
    DROP CONSTRAINT ops_runs_repository_grant_check,
    DROP CONSTRAINT ops_runs_state_check,
    DROP CONSTRAINT ops_runs_attempt_check,
    DROP CONSTRAINT ops_runs_check,  -- 0006: cancelled_by (named for its two columns)
    DROP CONSTRAINT ops_runs_claim_shape,
    ADD CONSTRAINT ops_runs_queue_shape CHECK (
        (
            (state = 'claimed' AND claim_owner IS NOT NULL AND lease_until IS NOT NULL)
            OR (state = 'open' AND claim_owner IS NULL AND lease_until IS NULL)
            OR (state IN ('succeeded', 'failed', 'expired') AND lease_until IS NULL)
        )
        AND attempt >= 0
        AND (cancelled_by IS NULL OR state = 'failed')
    );

-- And no run without its key row (checked when a run is inserted; a claim or a close
-- leaves the id alone, so the check is skipped for them).
ALTER TABLE ops_runs
    ADD CONSTRAINT ops_runs_key FOREIGN KEY (id) REFERENCES ops_run_keys (id);
