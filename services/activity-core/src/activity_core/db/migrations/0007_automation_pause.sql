-- 0007: an operator's pause of an automation (POST /ops/automations/{id}/pause).
-- Forward-only, like 0001.

-- `paused` stays the one flag every reader consults (fire, emission, explain, the UI): the
-- definition is paused by its file, retired, or held by an operator. These columns say
-- whether an operator holds it, who, since when and why; only the operator's resume clears
-- them. A definition sync keeps `paused` true while they are set (definitions/sync.py), so
-- the constraint below can never be tripped by a sync.
ALTER TABLE activity_definitions ADD COLUMN paused_by text;
ALTER TABLE activity_definitions ADD COLUMN paused_at timestamptz;
ALTER TABLE activity_definitions ADD COLUMN pause_reason text;
ALTER TABLE activity_definitions
    ADD CONSTRAINT activity_definitions_operator_pause_whole
    CHECK ((paused_by IS NULL) = (paused_at IS NULL) AND (pause_reason IS NULL OR paused_by IS NOT NULL));
ALTER TABLE activity_definitions
    ADD CONSTRAINT activity_definitions_operator_pause_is_paused
    CHECK (paused_by IS NULL OR paused);
