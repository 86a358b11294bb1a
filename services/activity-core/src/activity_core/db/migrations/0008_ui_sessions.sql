-- 0008: server-side sessions of the ops UI, and the failed sign-ins that throttle it.
-- Forward-only, like 0001.

-- One row per signed-in browser. The cookie carries a random session id; only its
-- sha256 digest is kept here, so a read of this table cannot be replayed as a cookie.
-- A session is valid while its row exists, has not expired (absolute and idle limits)
-- and the operator still has the credential it signed in with (`credential_digest`,
-- compared with the running configuration): logout deletes the row, "sign out
-- everywhere" deletes the operator's rows, and a rotated token ends every session
-- signed in with the old one.
CREATE TABLE ops_ui_sessions (
    id_digest text PRIMARY KEY CHECK (id_digest ~ '^[0-9a-f]{64}$'),
    operator text NOT NULL,
    credential_digest text NOT NULL,
    -- the per-session token every form of this session carries (CSRF)
    csrf_token text NOT NULL,
    client text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX ops_ui_sessions_by_operator ON ops_ui_sessions (operator);
CREATE INDEX ops_ui_sessions_by_expiry ON ops_ui_sessions (expires_at);

-- Failed sign-ins, per client address and per operator name typed, for the throttle
-- (counted over a sliding window; rows older than the window are deleted as new ones
-- come in). Shared by every API process on the database.
CREATE TABLE ops_ui_login_failures (
    id bigserial PRIMARY KEY,
    scope text NOT NULL CHECK (scope IN ('client', 'operator')),
    subject text NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ops_ui_login_failures_by_subject
    ON ops_ui_login_failures (scope, subject, failed_at);
