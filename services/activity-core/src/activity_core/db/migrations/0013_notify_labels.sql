-- 0013: a wake-up says what opened (issue 34).
-- The notification carried nothing, so each API process ran one claim per waiting claim key
-- for every opened run, also for keys that run could never match. The payload is now the
-- opened row's labels as JSON text; listeners claim only for the keys those labels may match
-- (queue/dispatch.py). pg_notify still folds identical notifications of one transaction, so
-- a bulk emit sends one per distinct label set. An empty payload keeps its old meaning,
-- "anything may have opened": it is sent for labels too long for a notification (8000 bytes).
CREATE OR REPLACE FUNCTION ops_runs_notify_open_row() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    payload text := NEW.labels::text;
BEGIN
    IF octet_length(payload) >= 8000 THEN
        payload := '';
    END IF;
    PERFORM pg_notify('ops_runs_open', payload);
    RETURN NULL;
END
$$;
