"""Every SQL statement of the claim queue, in one place.

Parameters are always `$n`; no value is ever formatted into a statement. Each statement
is written for the index it relies on (see db/migrations/0001_initial.sql); the EXPLAIN
tests in tests/integration guard those plans.
"""

from __future__ import annotations

from ops_contracts.queue import MAX_CLAIM_LIMIT

__all__ = [
    "CLAIM",
    "CLAIM_LIMIT_CEILING",
    "CLAIM_MANY_UNLESS_STALE",
    "CLAIM_ONE_UNLESS_STALE",
    "CLAIM_UNLESS_STALE",
    "CLOSE_LEASED_UNGRANTED",
    "CLOSE_MANY_LEASED_UNGRANTED",
    "CLOSE_TERMINAL",
    "COUNT_BY_STATE",
    "DEAD_ROWS",
    "DEFINITION_ID",
    "DISPATCH_CLAIM",
    "DISPATCH_HELD_BACK",
    "EXPIRE_LEASES",
    "GET_RUN",
    "HEARTBEAT",
    "LIST_RUNS",
    "LIST_RUNS_IN_STATE",
    "LOCK_RUN_FOR_CLOSE",
    "OLDEST_UNFINISHED",
    "RECLAIM_STALE",
    "RECLAIM_STALE_BATCH",
    "RECORD_SIGHTINGS",
    "RELEASE_UNDELIVERED",
    "REOPEN_AFTER_FAILURE",
    "REQUEUED_AS",
    "RUN_COLUMNS",
    "RUN_COLUMN_NAMES",
    "VACUUM_FACTS",
    "VACUUM_OPS_RUNS",
]

# The projection every endpoint answers: every model column except close_intent_digest
# (the digest identifies an accepted close; it is not for readers) and priority_rank.
RUN_COLUMNS = """
    id, activity_definition_id, idempotency_key, target_repo, title, description, labels,
    priority, state, claim_owner, lease_until, attempt, source_type, source_id,
    triggering_event_id, approach_hint, harness_profile_ref, execution_refs,
    repository_grant, result, last_error, created_at, updated_at, requeued_from, cancelled_by
"""


RUN_COLUMN_NAMES: tuple[str, ...] = tuple(c.strip() for c in RUN_COLUMNS.split(","))


def _qualified(alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in RUN_COLUMNS.split(","))


# Locks are FOR NO KEY UPDATE throughout: no queue statement changes a key, and the weaker
# lock does not conflict with the FOR KEY SHARE that a foreign-key check (task_spawn_log ->
# ops_runs) takes on a just-emitted row, so SKIP LOCKED never skips a run it could claim.

# At most this many stale claims are reopened by one RECLAIM_STALE statement.
RECLAIM_STALE_BATCH = 500

# Stale claims are reopened (or expired at the attempt ceiling) before a claim selects.
# SKIP LOCKED: a row another claimer or closer holds is left to it; a bounded batch keeps
# this statement short even after a fleet-wide outage left thousands of stale leases.
# The service repeats it while a batch comes back full, so every stale claim it can lock
# is reopened before the claim selects, however many there are: a claim never leases a
# run that ranks below a stale one still waiting in a later batch.
# RETURNING gives the owner that lost the lease (a reopened row's owner is cleared), so
# the log line can still name the worker.
# $1 = max attempts
# The one transition of a stale claim: open again for its next attempt, or expired at the
# ceiling. {order_and_limit} bounds the claim path's batch; expire-leases takes every row.
_END_STALE_LEASES = """
WITH stale AS (
    SELECT id, claim_owner
    FROM ops_runs
    WHERE state = 'claimed' AND lease_until <= now(){order_and_limit}
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE ops_runs AS r
SET state = CASE WHEN r.attempt >= $1 THEN 'expired' ELSE 'open' END,
    claim_owner = CASE WHEN r.attempt >= $1 THEN r.claim_owner ELSE NULL END,
    lease_until = NULL,
    close_intent_digest = NULL,
    updated_at = now()
FROM stale
WHERE r.id = stale.id
RETURNING r.id, r.state, stale.claim_owner
"""

RECLAIM_STALE = _END_STALE_LEASES.format(
    order_and_limit=f"\n    ORDER BY lease_until\n    LIMIT {RECLAIM_STALE_BATCH}"
)

# What a claim may pick: open rows matching the labels, in claim order (high -> low
# priority, then oldest), skipping rows locked by concurrent claimers. The ORDER BY matches
# ops_runs_open_claim_order, so the scan stops after LIMIT rows. {guard} is empty or the
# stale probe below; {mode} the labels mode ('none' | 'any' | 'all'), {labels} the labels
# ($4 and $5 unless a statement says otherwise).
_CLAIMABLE_TEMPLATE = """
    FROM ops_runs
    WHERE state = 'open'{guard}
      AND CASE {mode}::text
            WHEN 'any' THEN labels ?| {labels}::text[]
            WHEN 'all' THEN labels @> to_jsonb({labels}::text[])
            ELSE true
          END
    ORDER BY priority_rank, created_at, id
    LIMIT {limit}
    FOR NO KEY UPDATE SKIP LOCKED
"""
_CLAIMABLE = _CLAIMABLE_TEMPLATE.replace("{mode}", "$4").replace("{labels}", "$5")


def _lease_picked(claimable: str) -> str:
    """The claim itself: pick (``claimable``, a rendered _CLAIMABLE_TEMPLATE) and lease in
    the same statement. $1 worker, $2 lease seconds; the pick's own parameters follow."""
    return f"""
WITH picked AS (
    SELECT id{claimable})
UPDATE ops_runs AS r
SET state = 'claimed',
    claim_owner = $1,
    lease_until = now() + make_interval(secs => $2),
    attempt = r.attempt + 1,
    updated_at = now()
FROM picked
WHERE r.id = picked.id
RETURNING {_qualified("r")}
"""


# The common claim, written so that its plan can be cached. With `LIMIT $3` the plan
# cache never keeps a generic plan (it prices a parameter limit at 10% of the open rows,
# far above any custom plan), so every claim was planned afresh: 0.2 ms, more than the
# claim's own execution. Here the scan's limit is a constant, the API's ceiling on a
# claim's limit (ops_contracts MAX_CLAIM_LIMIT; the service sends larger limits to the
# coalesced statement), and $3 cuts that; the leased rows are found again by primary key
# from an array, which costs the same in a generic plan and a custom one.
# The outer LIMIT stops pulling before the row after the last, so the inner SKIP LOCKED
# locks exactly the rows handed out, in claim order; the answer is sorted in claim order
# (the array lookup returns rows in table order).
# $1 worker, $2 lease seconds, $3 limit (at most CLAIM_LIMIT_CEILING), $4 labels mode,
# $5 labels
CLAIM_LIMIT_CEILING = MAX_CLAIM_LIMIT
_CLAIM_CACHED_TEMPLATE = f"""
WITH picked AS (
    SELECT id
    FROM (
        SELECT id{_CLAIMABLE.format(guard="{guard}", limit=CLAIM_LIMIT_CEILING)}) AS head
    LIMIT $3
),
leased AS (
    UPDATE ops_runs AS r
    SET state = 'claimed',
        claim_owner = $1,
        lease_until = now() + make_interval(secs => $2),
        attempt = r.attempt + 1,
        updated_at = now()
    WHERE r.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING {_qualified("r")}, r.priority_rank
)
SELECT {RUN_COLUMNS}
FROM leased
ORDER BY priority_rank, created_at, id
"""

# Claims that arrived together (queue/coalesce.py) in one statement: claimer n (1-based,
# in arrival order) gets the n-th group of $3 rows in claim order, so each claimer gets
# what it would have got alone, one after another. RETURNING names the claimer and the
# row's place in claim order.
# $1 workers, $2 their lease seconds, $3 limit per claimer, $4 labels mode, $5 labels
_CLAIM_MANY_TEMPLATE = f"""
WITH claimers AS (
    SELECT c.worker_id, c.lease_seconds, c.n
    FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS c(worker_id, lease_seconds, n)
),
picked AS (
    SELECT p.id, row_number() OVER (ORDER BY p.priority_rank, p.created_at, p.id) AS k
    FROM (
        SELECT id, priority_rank, created_at{
    _CLAIMABLE.format(guard="{guard}", limit="$3::int * cardinality($1::text[])")
}
    ) AS p
)
UPDATE ops_runs AS r
SET state = 'claimed',
    claim_owner = c.worker_id,
    lease_until = now() + make_interval(secs => c.lease_seconds),
    attempt = r.attempt + 1,
    updated_at = now()
FROM picked
JOIN claimers AS c ON c.n = (picked.k - 1) / $3::int + 1
WHERE r.id = picked.id
RETURNING c.n AS claimer, picked.k AS claim_rank, {_qualified("r")}
"""

# The stale probe: a claim selects only when its snapshot holds no stale claim (one
# probe, evaluated once per statement), so stale claims are still reopened before any
# select; an empty answer sends the service through RECLAIM_STALE and CLAIM.
# The probe reads ops_runs_claimed_lease in lease order; since 0004 no other index holds
# claimed rows (ops_runs_by_state kept an entry per claim until VACUUM, and the planner
# drifted onto it: 0.25 -> 1.8 ms per claim after 60 s of churn).
_UNLESS_STALE = """
      AND (SELECT stale.lease_until
           FROM ops_runs AS stale
           WHERE stale.state = 'claimed' AND stale.lease_until <= now()
           ORDER BY stale.lease_until
           LIMIT 1) IS NULL"""

# Run right after RECLAIM_STALE, in a fresh snapshot that sees the rows it reopened.
# $1 worker, $2 lease seconds, $3 limit, $4 labels mode, $5 labels
CLAIM = _lease_picked(_CLAIMABLE.format(guard="", limit="$3"))

# The common claim in one round trip (same parameters as CLAIM, limit at most
# CLAIM_LIMIT_CEILING).
CLAIM_UNLESS_STALE = _CLAIM_CACHED_TEMPLATE.format(guard=_UNLESS_STALE)

# The common claim of one run, the one a worker without a batch sends: CLAIM with a
# constant LIMIT 1, so its plan can be cached (_CLAIM_CACHED_TEMPLATE says why that
# matters) without finding the leased row again from an array and sorting it: about 2%
# less server CPU per claim+complete cycle.
# $1 worker, $2 lease seconds, $3 labels mode, $4 labels
CLAIM_ONE_UNLESS_STALE = _lease_picked(
    _CLAIMABLE_TEMPLATE.format(guard=_UNLESS_STALE, limit=1, mode="$3", labels="$4")
)

# The common claim of several claimers in one round trip (see _CLAIM_MANY_TEMPLATE). A
# claimer with no row back goes through RECLAIM_STALE and CLAIM on its own.
CLAIM_MANY_UNLESS_STALE = _CLAIM_MANY_TEMPLATE.format(guard=_UNLESS_STALE)

# A dispatch pass's claim (queue/dispatch.py): CLAIM_MANY_UNLESS_STALE, and when it leased
# nothing because a stale claim held it back, one row more with claimer 0 saying so (the
# probe in the statement's own snapshot, so it agrees with the guard). The pass reopens
# stale claims only then: a replica whose statement found the opened run already taken
# (locked or gone) spends no second transaction on a reclaim that finds nothing.
# Parameters as CLAIM_MANY_UNLESS_STALE.
DISPATCH_HELD_BACK = 0
DISPATCH_CLAIM = f"""
WITH leased AS ({CLAIM_MANY_UNLESS_STALE})
SELECT * FROM leased
UNION ALL
SELECT {DISPATCH_HELD_BACK}, 0, {", ".join("NULL" for _ in RUN_COLUMN_NAMES)}
WHERE NOT EXISTS (SELECT 1 FROM leased)
  AND EXISTS (SELECT 1
              FROM ops_runs AS stale
              WHERE stale.state = 'claimed' AND stale.lease_until <= now())
"""

# Runs a dispatch pass leased for a long-poll waiter whose request was cancelled before
# the answer went out (queue/dispatch.py): open again at once, attempt restored (the worker
# never saw it), so the reopen's NOTIFY hands them to the next waiter. Only rows still
# leased to that worker at that attempt: a run that meanwhile moved on is left alone.
# $1 run ids, $2 worker, $3 their attempts (same order as $1)
RELEASE_UNDELIVERED = """
UPDATE ops_runs AS r
SET state = 'open', claim_owner = NULL, lease_until = NULL, attempt = r.attempt - 1,
    updated_at = now()
FROM unnest($1::uuid[], $3::int[]) AS u(id, attempt)
WHERE r.id = u.id AND r.state = 'claimed' AND r.claim_owner = $2 AND r.attempt = u.attempt
RETURNING r.id
"""

# A close or heartbeat locks its one row for the rest of its short transaction, and reads
# the clock of the same transaction so "lease ended" is judged by the database, not the app.
LOCK_RUN_FOR_CLOSE = f"""
SELECT {RUN_COLUMNS}, close_intent_digest, (lease_until > now()) AS lease_active
FROM ops_runs
WHERE id = $1
FOR NO KEY UPDATE
"""

# $1 id, $2 lease seconds
HEARTBEAT = f"""
UPDATE ops_runs
SET lease_until = now() + make_interval(secs => $2), updated_at = now()
WHERE id = $1
RETURNING {RUN_COLUMNS}
"""

# $1 id, $2 terminal state, $3 result, $4 last_error, $5 close intent digest
CLOSE_TERMINAL = f"""
UPDATE ops_runs
SET state = $2, lease_until = NULL, result = $3, last_error = $4,
    close_intent_digest = $5, updated_at = now()
WHERE id = $1
RETURNING {RUN_COLUMNS}
"""

# The common close in one statement: the closer owns an active lease on a run queued
# without a repository grant, at the attempt the close names (fencing; NULL: not named),
# so decide_close could only answer ApplyTerminal. The row lock is the UPDATE's own; no
# row back means "not that case", and the service falls back to LOCK_RUN_FOR_CLOSE +
# decide_close, which answers every other case (refusals, a stale attempt's
# expired_lease, reconciliation, grant evidence, reopen). The conditions here must stay
# a subset of decide_close's ApplyTerminal branch (tests/unit/test_ac_close_fast_path.py).
# $1 id, $2 worker, $3 terminal state, $4 result, $5 last_error, $6 close intent digest,
# $7 attempt
CLOSE_LEASED_UNGRANTED = f"""
UPDATE ops_runs
SET state = $3, lease_until = NULL, result = $4, last_error = $5,
    close_intent_digest = $6, updated_at = now()
WHERE id = $1
  AND state = 'claimed'
  AND claim_owner = $2
  AND lease_until > now()
  AND repository_grant IS NULL
  AND ($7::int IS NULL OR attempt = $7::int)
RETURNING {RUN_COLUMNS}
"""

# Common closes that arrived together (queue/coalesce.py) in one statement: each closer's
# row is changed under exactly CLOSE_LEASED_UNGRANTED's conditions. SKIP LOCKED: a run
# another transaction holds (a heartbeat, a locking close, an operator, or for a moment a
# claimer's scan passing its stale index entry) is left out rather than waited for, so one
# held row never stalls the closes that share the statement and two such statements can
# never deadlock. A closer whose run is not among the rows back takes the
# locking path on its own (and waits there for its row alone). The service never
# puts one run in a statement twice, so a row back names its closer.
# $1 ids, $2 workers, $3 terminal states, $4 results, $5 last_errors, $6 digests,
# $7 attempts (NULL where a close names none)
CLOSE_MANY_LEASED_UNGRANTED = f"""
WITH closing AS (
    SELECT r.id, c.state, c.result, c.last_error, c.digest
    FROM unnest(
             $1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::int[]
         ) AS c(id, worker_id, state, result, last_error, digest, attempt)
    JOIN ops_runs AS r ON r.id = c.id
    WHERE r.state = 'claimed'
      AND r.claim_owner = c.worker_id
      AND r.lease_until > now()
      AND r.repository_grant IS NULL
      AND (c.attempt::int IS NULL OR r.attempt = c.attempt::int)
    FOR NO KEY UPDATE OF r SKIP LOCKED
)
UPDATE ops_runs AS r
SET state = closing.state, lease_until = NULL, result = closing.result,
    last_error = closing.last_error, close_intent_digest = closing.digest, updated_at = now()
FROM closing
WHERE r.id = closing.id
RETURNING {_qualified("r")}
"""

# A failure accepted with reopen below the ceiling returns the row to the queue and clears
# its owner, lease and close identity: a repeat is not a terminal reconciliation.
# $1 id, $2 result (NULL keeps the previous one), $3 last_error
REOPEN_AFTER_FAILURE = f"""
UPDATE ops_runs
SET state = 'open', claim_owner = NULL, lease_until = NULL, close_intent_digest = NULL,
    result = coalesce($2, result), last_error = $3, updated_at = now()
WHERE id = $1
RETURNING {RUN_COLUMNS}
"""

# The runs requeued from a run, oldest first (ops_runs_by_requeued_from). Only failed and
# expired runs can have any; the original row is never written when one is made, so its
# projection computes them. Open and claimed runs (every claim, heartbeat and common
# close answer) have none by construction, and their statements do not ask.
_REQUEUED_AS = """
    ARRAY(SELECT successor.id FROM ops_runs AS successor
          WHERE successor.requeued_from = {alias}.id
          ORDER BY successor.created_at, successor.id) AS requeued_as"""

# $1 id
REQUEUED_AS = f"SELECT {_REQUEUED_AS.format(alias='r')} FROM ops_runs AS r WHERE r.id = $1"

# The run's publication (ops_run_publications, publication/queries.py writes it) as the
# run's `publication` object, NULL when nobody asked for one.
_PUBLICATION = """
(SELECT jsonb_build_object(
    'state', p.state, 'ref', p.ref, 'commit', p.commit,
    'pull_request_url', p.pull_request_url, 'error', p.error,
    'requested_by', p.requested_by, 'requested_at', p.requested_at,
    'published_at', p.published_at)
 FROM ops_run_publications p WHERE p.run_id = r.id) AS publication
"""

GET_RUN = f"""
SELECT {_qualified("r")}, {_REQUEUED_AS.format(alias="r")}, {_PUBLICATION}
FROM ops_runs AS r
WHERE r.id = $1
"""

# An automation's definition id from its slug or its UUID (the operator filters name
# automations either way). $1 slug, $2 the same text as a UUID (NULL when it is not one)
DEFINITION_ID = """
SELECT id FROM activity_definitions WHERE slug = $1 OR id = $2::uuid
"""

# Keyset pagination, newest first. Filters are optional: a NULL parameter disables one.
# $1 state, $2 labels (all must be present), $3 definition id, $4 target repo,
# $5 cursor created_at, $6 cursor id, $7 limit, $8 worker (claim_owner: the lease holder,
# or the last one of a terminal run), $9 created at or after, $10 created before
# Without a state, the listing reads ops_run_keys (0009): its listing index in
# (created_at, id) order, newest first, or the definition's or repository's, or a range of
# it for a time window, and each run by primary key. A worker filter keeps the rows it
# reads (claim_owner has no index of its own, which would cost every claim an index
# write): combine it with a window or a state for a worker whose runs are old.
# With a state, LIST_RUNS_IN_STATE reads that state's own index of ops_runs
# (ops_runs_open_claim_order, ops_runs_claimed_lease, ops_runs_by_terminal_state), which
# an ordered scan of every run would have to filter (a failed run is ~1 in 100).
# Both answer the same rows in the same order for the same filters.
_LIST_TEMPLATE = f"""
SELECT {_qualified("r")}, {_REQUEUED_AS.format(alias="r")}
FROM {{source}}
WHERE ($1::text IS NULL OR r.state = $1)
  AND ($2::text[] IS NULL OR r.labels @> to_jsonb($2::text[]))
  AND ($3::uuid IS NULL OR {{k}}.activity_definition_id = $3)
  AND ($4::text IS NULL OR {{k}}.target_repo = $4)
  AND ($5::timestamptz IS NULL OR ({{k}}.created_at, {{k}}.id) < ($5, $6::uuid))
  AND ($8::text IS NULL OR r.claim_owner = $8)
  AND ($9::timestamptz IS NULL OR {{k}}.created_at >= $9)
  AND ($10::timestamptz IS NULL OR {{k}}.created_at < $10)
ORDER BY {{k}}.created_at DESC, {{k}}.id DESC
LIMIT $7
"""
LIST_RUNS = _LIST_TEMPLATE.format(
    source="ops_run_keys AS k JOIN ops_runs AS r ON r.id = k.id", k="k"
)
LIST_RUNS_IN_STATE = _LIST_TEMPLATE.format(source="ops_runs AS r", k="r")

# Operator-driven lease expiry: the same transition as RECLAIM_STALE, for every stale row.
# $1 = max attempts
EXPIRE_LEASES = _END_STALE_LEASES.format(order_and_limit="")

COUNT_BY_STATE = "SELECT state, count(*) AS n FROM ops_runs GROUP BY state"

# How long the oldest run of each unfinished state has existed (queue/run_ages.py). One
# branch per state, so each reads only that state's partial index (ops_runs_open_claim_order,
# ops_runs_claimed_lease), whose size follows the backlog and the workers, not the history.
# A state without runs answers NULL.
OLDEST_UNFINISHED = """
SELECT 'open' AS state, extract(epoch FROM now() - min(created_at))::float8 AS age_seconds
FROM ops_runs WHERE state = 'open'
UNION ALL
SELECT 'claimed', extract(epoch FROM now() - min(created_at))::float8
FROM ops_runs WHERE state = 'claimed'
"""

# -- the workers seen by claims (queue/sightings.py) -------------------------------------------

# Each API process writes the last claim of every worker identity it served since its
# previous write, in one statement every few seconds (never on the claim path). Several
# processes write the same identity: the later claim wins, an older one changes nothing.
# The label filters travel as JSON text: a list inside an array parameter would be read
# as another dimension of the array.
# $1 worker ids, $2 claim times, $3 label filters as JSON arrays (NULL: any run),
# $4 labels modes, $5 limits
RECORD_SIGHTINGS = """
INSERT INTO ops_workers AS w (worker_id, last_claim_at, labels, labels_mode, claim_limit)
SELECT s.worker_id, s.at, s.labels::jsonb, s.labels_mode, s.claim_limit
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::int[])
     AS s(worker_id, at, labels, labels_mode, claim_limit)
ON CONFLICT (worker_id) DO UPDATE
SET last_claim_at = excluded.last_claim_at,
    labels = excluded.labels,
    labels_mode = excluded.labels_mode,
    claim_limit = excluded.claim_limit
WHERE w.last_claim_at < excluded.last_claim_at
"""

# -- the queue table's own upkeep (queue/vacuum.py) -----------------------------------------

# What decides whether vacuuming ops_runs ourselves is needed and allowed. to_regclass: no
# row before the schema exists. A table's owner (or a member of the owning role) and a
# superuser may VACUUM it; from PostgreSQL 17 so may a holder of MAINTAIN (the CASE keeps
# the privilege name away from older servers, which would refuse it).
VACUUM_FACTS = """
SELECT current_setting('autovacuum')::bool AS server_autovacuum,
       current_setting('track_counts')::bool AS track_counts,
       coalesce(
           (SELECT option_value::bool FROM pg_options_to_table(c.reloptions)
            WHERE option_name = 'autovacuum_enabled'),
           true
       ) AS table_autovacuum,
       pg_has_role(current_user, c.relowner, 'MEMBER')
           OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
           OR CASE WHEN current_setting('server_version_num')::int >= 170000
                   THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
           AS may_vacuum
FROM pg_class c
WHERE c.oid = to_regclass('ops_runs')
"""

# The cumulative statistics system's count; backends report theirs about once a second.
DEAD_ROWS = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass('ops_runs')"

# SKIP_LOCKED: a vacuum already running on the table (autovacuum's, another replica's) is
# enough; never queue behind it. INDEX_CLEANUP ON: the index entries are the point, and from
# PostgreSQL 14 the default skips index vacuuming when few heap pages hold dead rows, which
# is exactly a queue whose dead rows sit together at its head. TRUNCATE OFF: cutting empty
# pages off the table's end takes an ACCESS EXCLUSIVE lock that would stall every claim.
VACUUM_OPS_RUNS = "VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE OFF) ops_runs"
