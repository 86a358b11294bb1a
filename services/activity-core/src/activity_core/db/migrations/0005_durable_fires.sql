-- 0005: a fire ends emitted, or failed with its reason; the IssueSink write is its own step.
-- Forward-only, like 0001.

-- Why a fire failed (status 'failed'), or the error its emission is retrying on while it
-- is still 'started'; cleared when it emits. Shown in the ops UI and the runs JSON.
ALTER TABLE activity_runs ADD COLUMN error text;
-- A fire started by `activity-core retry-fire`: the run id of the fire it repeats (same
-- triggering event, hence the same idempotency keys).
ALTER TABLE activity_runs ADD COLUMN retry_of text;

-- The IssueSink write of an audit row, done after the ops run and the audit row are
-- committed, so the sink never stands between a fire and its ops runs:
--   none     nothing to write (a duplicate, a report-only item, the `none` sink)
--   pending  to be written; sink_payload holds the task as it was emitted
--   written  the sink accepted it (issue_sink_ref holds its reference, if it gave one)
--   failed   the sink refused it, or stayed down for the whole retry window; sink_error
--            says why, sink_payload stays for `activity-core retry-fire`
ALTER TABLE task_spawn_log ADD COLUMN sink_status text NOT NULL DEFAULT 'none'
    CHECK (sink_status IN ('none', 'pending', 'written', 'failed'));
ALTER TABLE task_spawn_log ADD COLUMN sink_payload jsonb;
ALTER TABLE task_spawn_log ADD COLUMN sink_error text;
-- Rows written before this migration wrote their audit row only after the sink accepted
-- the task.
UPDATE task_spawn_log
SET sink_status = 'written'
WHERE outcome IN ('created', 'queue_disabled') AND issue_sink <> 'none';
ALTER TABLE task_spawn_log ADD CONSTRAINT task_spawn_log_sink_payload
    CHECK (sink_status NOT IN ('pending', 'failed') OR sink_payload IS NOT NULL);
