"""Every SQL statement of the operator plane, in one place.

Parameters are always `$n`. The statements on ops_runs read the indexes the claim queue
already keeps (db/migrations): the open and claimed partial indexes for the live queue,
ops_runs_by_terminal_state for terminal runs, ops_runs_by_requeued_from for successors;
tests/integration/test_ac_operator_plans.py holds their plans at a million rows. None
runs on the claim path.
"""

from __future__ import annotations

from activity_core.queue.queries import RUN_COLUMNS

__all__ = [
    "AUDIT_INSERT",
    "AUDIT_PAGE",
    "CANCEL",
    "DEAD_LETTER_PAGE",
    "DEFINITION_OF_RUN",
    "OPEN_AHEAD",
    "REQUEUE",
    "REQUEUE_SOURCE",
    "RUNS_HELD",
    "RUN_BY_KEY",
    "SUMMARY",
    "UI_LOGIN_ATTEMPTS",
    "UI_LOGIN_ATTEMPT_FORGET",
    "UI_LOGIN_ATTEMPT_INSERT",
    "UI_LOGIN_FAILURES_PRUNE",
    "UI_SESSIONS_PRUNE",
    "UI_SESSION_DELETE",
    "UI_SESSION_DELETE_OPERATOR",
    "UI_SESSION_FIND",
    "UI_SESSION_INSERT",
    "UI_SESSION_TOUCH",
    "WORKERS_SEEN",
]


def _qualified(alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in RUN_COLUMNS.split(","))


_REQUEUED_AS = """
    ARRAY(SELECT successor.id FROM ops_runs AS successor
          WHERE successor.requeued_from = {alias}.id
          ORDER BY successor.created_at, successor.id) AS requeued_as"""

# -- requeue ---------------------------------------------------------------------------------

# The run to requeue. No lock: only failed and expired runs are requeued, and a terminal
# row never changes again; the successor's foreign key takes FOR KEY SHARE on it anyway.
# $1 id
REQUEUE_SOURCE = "SELECT id, state FROM ops_runs WHERE id = $1"

# A run by its idempotency key (the unique index of ops_run_keys): the successor an
# earlier requeue with the same key made. $1 key
RUN_BY_KEY = f"""
SELECT {_qualified("r")}, {_REQUEUED_AS.format(alias="r")}
FROM ops_run_keys AS k
JOIN ops_runs AS r ON r.id = k.id
WHERE k.idempotency_key = $1
"""

# The successor: a new open run that copies what the original was (definition, task,
# repository, labels, priority, execution selection, grant, attribution, source and
# trigger), at attempt 0, keyed by the original and the request's key. The original is
# only read. A key that exists inserts nothing (ops_runs_fixed_columns_on_insert, 0009):
# a concurrent requeue with the same key waits on the unique index of ops_run_keys for
# the other transaction, then inserts nothing (the service reads the other's successor in a new
# statement, which sees it committed). The state condition
# repeats the service's check in the statement that acts on it.
# $1 original id, $2 successor id, $3 successor idempotency key
REQUEUE = f"""
INSERT INTO ops_runs (
    id, activity_definition_id, idempotency_key, target_repo, title, description, labels,
    priority, state, attempt, source_type, source_id, triggering_event_id, approach_hint,
    harness_profile_ref, execution_refs, repository_grant, requeued_from
)
SELECT $2, o.activity_definition_id, $3, o.target_repo, o.title, o.description, o.labels,
       o.priority, 'open', 0, o.source_type, o.source_id, o.triggering_event_id,
       o.approach_hint, o.harness_profile_ref, o.execution_refs, o.repository_grant, o.id
FROM ops_runs AS o
WHERE o.id = $1 AND o.state IN ('failed', 'expired')
RETURNING {RUN_COLUMNS}
"""

# -- cancel ----------------------------------------------------------------------------------

# After queue.queries.LOCK_RUN_FOR_CLOSE and the pure decision (the row is open or claimed):
# failed, owner, lease and close identity cleared, why and by whom recorded. A close or
# heartbeat of the worker that held it finds it failed and refuses (close_decision.py).
# $1 id, $2 last_error, $3 the operator's name
CANCEL = f"""
UPDATE ops_runs
SET state = 'failed', claim_owner = NULL, lease_until = NULL, close_intent_digest = NULL,
    last_error = $2, cancelled_by = $3, updated_at = now()
WHERE id = $1
RETURNING {RUN_COLUMNS}
"""

# -- views -----------------------------------------------------------------------------------

# The live queue in full, terminal runs of a window. Each count reads one index: open
# rows ops_runs_open_claim_order, claimed (and stalled) rows ops_runs_claimed_lease, each
# terminal state a range of ops_runs_by_terminal_state (state, created_at). The oldest
# open run is one probe of ops_runs_open_claim_order per priority (its order is priority
# first), not a scan of the backlog. Counting every terminal run ever would read the
# whole table; the window bounds that.
# $1 terminal runs created at or after
SUMMARY = """
WITH oldest AS (
    SELECT o.id, o.created_at
    FROM (VALUES (0::smallint), (1::smallint), (2::smallint)) AS p(rank)
    CROSS JOIN LATERAL (
        SELECT id, created_at
        FROM ops_runs
        WHERE state = 'open' AND priority_rank = p.rank
        ORDER BY created_at, id
        LIMIT 1
    ) AS o
    ORDER BY o.created_at, o.id
    LIMIT 1
)
SELECT now() AS as_of,
       (SELECT count(*) FROM ops_runs WHERE state = 'open') AS open,
       (SELECT count(*) FROM ops_runs WHERE state = 'claimed') AS claimed,
       (SELECT count(*) FROM ops_runs
        WHERE state = 'claimed' AND lease_until <= now()) AS stalled,
       (SELECT count(*) FROM ops_runs
        WHERE state = 'succeeded' AND created_at >= $1) AS succeeded,
       (SELECT count(*) FROM ops_runs WHERE state = 'failed' AND created_at >= $1) AS failed,
       (SELECT count(*) FROM ops_runs WHERE state = 'expired' AND created_at >= $1) AS expired,
       (SELECT id FROM oldest) AS oldest_open_id,
       (SELECT created_at FROM oldest) AS oldest_open_created_at
"""

# The dead letter: failed and expired runs, newest first (keyset on created_at, id like
# the listing). One ordered range of ops_runs_by_terminal_state per state, each stopping
# at the page size, merged: the page never reads more than twice its size of index
# entries that pass the filters, however many runs succeeded.
# $1 definition id (NULL: all), $2 cursor created_at, $3 cursor id, $4 page size + 1,
# $5 requeued (NULL: both, true: only runs requeued already, false: only the others)
_DEAD_LETTER_BRANCH = """
    (SELECT *
     FROM ops_runs AS d
     WHERE d.state = '{state}'
       AND ($1::uuid IS NULL OR d.activity_definition_id = $1)
       AND ($2::timestamptz IS NULL OR (d.created_at, d.id) < ($2, $3::uuid))
       AND ($5::boolean IS NULL OR EXISTS (
               SELECT 1 FROM ops_runs AS s WHERE s.requeued_from = d.id) = $5)
     ORDER BY d.created_at DESC, d.id DESC
     LIMIT $4)"""

DEAD_LETTER_PAGE = f"""
SELECT {_qualified("r")}, {_REQUEUED_AS.format(alias="r")}, def.slug AS automation
FROM ({_DEAD_LETTER_BRANCH.format(state="failed")}
      UNION ALL
      {_DEAD_LETTER_BRANCH.format(state="expired")}) AS r
JOIN activity_definitions AS def ON def.id = r.activity_definition_id
ORDER BY r.created_at DESC, r.id DESC
LIMIT $4
"""

# The worker identities the claims recorded (queue/sightings.py), latest first.
# $1 at most this many
WORKERS_SEEN = """
SELECT worker_id, last_claim_at, labels, labels_mode, claim_limit
FROM ops_workers
ORDER BY last_claim_at DESC, worker_id
LIMIT $1
"""

# The runs held now, by holder, in lease order (ops_runs_claimed_lease: claimed rows only).
RUNS_HELD = """
SELECT claim_owner, id, lease_until, (lease_until > now()) AS lease_live
FROM ops_runs
WHERE state = 'claimed'
ORDER BY lease_until, id
"""

# How many open runs a claim takes before this one: those before it in claim order
# (priority, then age), a range of ops_runs_open_claim_order that ends at the run.
# $1 the run's id
OPEN_AHEAD = """
SELECT count(*)
FROM ops_runs AS o,
     (SELECT priority_rank, created_at, id FROM ops_runs WHERE id = $1) AS me
WHERE o.state = 'open'
  AND (o.priority_rank, o.created_at, o.id) < (me.priority_rank, me.created_at, me.id)
"""

# The automation a run belongs to. $1 definition id
DEFINITION_OF_RUN = """
SELECT slug, paused, removed_at IS NOT NULL AS removed
FROM activity_definitions
WHERE id = $1
"""

# -- audit -------------------------------------------------------------------------------------

# $1 actor, $2 role, $3 action, $4 target, $5 request id, $6 outcome, $7 code, $8 detail,
# $9 details
AUDIT_INSERT = """
INSERT INTO ops_audit (actor, role, action, target, request_id, outcome, code, detail, details)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
"""

# Newest first (id order), keyset on id: ops_audit_by_target or ops_audit_by_actor when one
# of them filters, else the primary key backwards.
# $1 target, $2 actor, $3 action, $4 before this id, $5 page size + 1
AUDIT_PAGE = """
SELECT id, at, actor, role, action, target, request_id, outcome, code, detail, details
FROM ops_audit
WHERE ($1::text IS NULL OR target = $1)
  AND ($2::text IS NULL OR actor = $2)
  AND ($3::text IS NULL OR action = $3)
  AND ($4::bigint IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5
"""


# -- ops UI sessions (sessions.py) -------------------------------------------------------

# $1 id digest, $2 operator, $3 credential binding, $4 csrf token, $5 client, $6 lifetime
UI_SESSION_INSERT = """
INSERT INTO ops_ui_sessions (id_digest, operator, credential_digest, csrf_token, client,
                             expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6::interval)
RETURNING operator, credential_digest, csrf_token, created_at, last_seen_at, expires_at,
          now() AS as_of
"""

# A session that has expired or sat idle too long is not found (and pruned later).
# $1 id digest, $2 idle limit
UI_SESSION_FIND = """
SELECT operator, credential_digest, csrf_token, created_at, last_seen_at, expires_at,
       now() AS as_of
FROM ops_ui_sessions
WHERE id_digest = $1 AND expires_at > now() AND last_seen_at > now() - $2::interval
"""

# $1 id digest
UI_SESSION_TOUCH = "UPDATE ops_ui_sessions SET last_seen_at = now() WHERE id_digest = $1"

# $1 id digest
UI_SESSION_DELETE = "DELETE FROM ops_ui_sessions WHERE id_digest = $1 RETURNING operator"

# $1 operator
UI_SESSION_DELETE_OPERATOR = "DELETE FROM ops_ui_sessions WHERE operator = $1"

# $1 idle limit
UI_SESSIONS_PRUNE = """
DELETE FROM ops_ui_sessions
WHERE expires_at <= now() OR last_seen_at <= now() - $1::interval
"""

# A sign-in attempt, recorded (and committed) before its token is looked at: a failure
# unless the attempt is forgotten (refused by the throttle, or signed in).
# $1 scope, $2 subject
UI_LOGIN_ATTEMPT_INSERT = (
    "INSERT INTO ops_ui_login_failures (scope, subject) VALUES ($1, $2) RETURNING id"
)

# $1 ids
UI_LOGIN_ATTEMPT_FORGET = "DELETE FROM ops_ui_login_failures WHERE id = ANY($1::bigint[])"

# $1 window
UI_LOGIN_FAILURES_PRUNE = (
    "DELETE FROM ops_ui_login_failures WHERE failed_at <= now() - $1::interval"
)

# A subject's attempts in the window, this one's included (every committed failure, and
# the attempts of others still in flight), and when its sign-ins open again: the
# limit-th newest of the others leaving the window (NULL: fewer than `limit` others).
# One statement, one snapshot. $1 scope, $2 subject, $3 window, $4 limit, $5 this
# attempt's id
UI_LOGIN_ATTEMPTS = """
SELECT
    count(*) AS attempts,
    (SELECT other.failed_at + $3::interval - now()
     FROM ops_ui_login_failures AS other
     WHERE other.scope = $1 AND other.subject = $2 AND other.id <> $5
       AND other.failed_at > now() - $3::interval
     ORDER BY other.failed_at DESC
     OFFSET $4 - 1
     LIMIT 1) AS retry_after
FROM ops_ui_login_failures
WHERE scope = $1 AND subject = $2 AND failed_at > now() - $3::interval
"""
