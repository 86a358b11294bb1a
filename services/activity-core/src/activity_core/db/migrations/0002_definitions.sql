-- 0002: definition-file sync bookkeeping and the emission audit invariant.
-- Forward-only, like 0001.

-- A definition whose file disappeared from the synced set is retired, never deleted:
-- ops_runs, activity_runs and task_spawn_log reference it. Retiring pauses it (its
-- schedule is paused, emission refuses it) and records when; a file that comes back
-- clears the mark and takes its own `paused` again.
ALTER TABLE activity_definitions ADD COLUMN removed_at timestamptz;
ALTER TABLE activity_definitions
    ADD CONSTRAINT activity_definitions_removed_is_paused CHECK (removed_at IS NULL OR paused);

-- At most one audit row says `created` per idempotency key: emission serializes emits of
-- one key and writes `created` once, `duplicate` for every later emit of the same key.
CREATE UNIQUE INDEX task_spawn_log_one_created ON task_spawn_log (idempotency_key)
    WHERE outcome = 'created';
