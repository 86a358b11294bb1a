-- 0010: a sink write names the one try that may send it. Forward-only, like 0001.

-- A try at a fire's sink writes (`publish_pending`) takes its writes by setting
-- `sink_sender` to a token of its own, and asks before every HTTP attempt whether the
-- write is still its own and still owed. A later try (Temporal's retry, or an operator's
-- retry-fire) takes the writes over; the end of the retry window (`give_up`) clears the
-- sender. So a try that Temporal has already timed out, still running on its worker,
-- stops instead of sending a write that has been given up or handed to another try.
-- NULL: no try holds the write (rows before this migration, written or given up rows).
ALTER TABLE task_spawn_log ADD COLUMN sink_sender uuid;
