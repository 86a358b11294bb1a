-- 0003: make the claim path cheaper under churn.

-- Wake long-poll claimers only when a row becomes open. The statement-level triggers of 0001
-- ran for every UPDATE (each claim, heartbeat and close) and scanned its transition table;
-- a row trigger with a WHEN clause costs nothing for the transitions that do not open a row.
-- pg_notify folds identical notifications of one transaction, so a bulk emit sends one.
DROP TRIGGER ops_runs_open_after_insert ON ops_runs;
DROP TRIGGER ops_runs_open_after_update ON ops_runs;
DROP FUNCTION ops_runs_notify_open();

CREATE FUNCTION ops_runs_notify_open_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ops_runs_open', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER ops_runs_notify_open
    AFTER INSERT OR UPDATE OF state ON ops_runs
    FOR EACH ROW
    WHEN (NEW.state = 'open')
    EXECUTE FUNCTION ops_runs_notify_open_row();

-- Every claim and close leaves a dead tuple at the head of the open-claim index; only
-- VACUUM removes them, and until it does each claim reads past them. Vacuum this table
-- after a fixed number of dead rows rather than a fraction of a table that only grows.
ALTER TABLE ops_runs SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02
);
