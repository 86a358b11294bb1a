-- 0011: priority_rank is a plain column the insert trigger fills. Forward-only, like 0001.

-- PostgreSQL (before 18) computes every stored generated column again on every UPDATE of
-- the row, whatever the UPDATE changes: each claim and close computed the rank's CASE. A
-- run's priority is fixed at insert (0009), so its rank is too: the insert trigger sets it
-- (overriding any value an INSERT names), and the update trigger refuses a change to it.
-- DROP EXPRESSION keeps the stored values and rewrites nothing.
ALTER TABLE ops_runs ALTER COLUMN priority_rank DROP EXPRESSION;
ALTER TABLE ops_runs ALTER COLUMN priority_rank SET NOT NULL;

CREATE OR REPLACE FUNCTION ops_runs_fixed_columns_on_insert() RETURNS trigger
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

CREATE OR REPLACE FUNCTION ops_runs_fixed_columns_unchanged() RETURNS trigger
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

DROP TRIGGER ops_runs_fixed_columns_unchanged ON ops_runs;
CREATE TRIGGER ops_runs_fixed_columns_unchanged
    BEFORE UPDATE OF id, idempotency_key, activity_definition_id, target_repo,
        triggering_event_id, created_at, labels, priority, priority_rank, source_type,
        execution_refs, repository_grant ON ops_runs
    FOR EACH ROW
    EXECUTE FUNCTION ops_runs_fixed_columns_unchanged();
