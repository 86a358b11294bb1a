"""Claim-queue throughput benchmark: phases (a) to (e), each figure a ratio to (a) in the same run.

    uv run python bench/claim_throughput.py [--database-url URL] [--quick]

One run, one scratch database (``bench_<random>``, migrated, dropped at the end even on
Ctrl-C or SIGTERM), and these figures:

(a) the raw-SQL ceiling: claim-one + complete-one cycles/s over 8 asyncpg connections with
    ``synchronous_commit`` on, using the real schema and the statements of queue/queries.py
    as queue/claim.py and queue/close.py run them, autocommit (claim: CLAIM_ONE_UNLESS_STALE,
    with RECLAIM_STALE + CLAIM after an empty answer; complete: CLOSE_LEASED_UNGRANTED), each
    connection claiming for itself (the API coalesces concurrent claims into one statement,
    queue/coalesce.py; the ceiling is the issue's claim-one cycle and does not).
    Measured twice (first and late in the run); the higher figure is the ceiling. A
    minimal queue table (id, state, priority, created_at, one partial index) is measured
    right after each, so the cost of the real schema shows; its higher figure is the
    reference, and each pair measured back to back is shown too (the machine's speed
    drifts within a run);
(b) the same cycle through the HTTP API (``activity-core serve`` as a separate process)
    with 8 and 32 concurrent workers, with p50/p99 latency of claim and of complete;
(c) the same with ``limit: 10`` claims (runs/s);
(d) claim p50 with 10k and with 1M open rows (one connection; each claim is rolled back
    so the table stays as seeded);
(e) throughput in the first and the last 10 s of a 60 s sustained HTTP run, autovacuum
    as the server is configured and the API vacuuming ops_runs itself past its dead-row
    limit (queue/vacuum.py); the same over raw SQL, which churns far more rows and has
    nothing but autovacuum (on the machine's server: nothing) to clean up after it.

The machine is small and shared: each phase reports the CPU it used by who (this process,
the API server, our PostgreSQL backends, everyone else) and CPU milliseconds per run, and a
phase during which other processes took more than NOISE_LIMIT cores is measured again (the
best attempt stands). `--profile-api FILE` runs the API server under cProfile and prints
its hottest functions (for finding where time goes; it slows the HTTP phases).

Every phase tracks the ids it claimed: an id claimed twice in a phase (no phase reopens a
run) is a double claim, and the database is checked afterwards (no row with attempt > 1,
none left claimed, every completion stored). Every figure is also given as a ratio to (a)
from the same run.

The server is --database-url, else BENCH_DATABASE_URL, else TEST_DATABASE_URL; with none
of them set, an embedded PostgreSQL is started in a temporary directory and stopped after.

The modules, in the order a run uses them: ``plan`` (what to run, the workload and the
targets), ``scratch`` (the scratch database and processes, released even on Ctrl-C),
``sql`` and ``seeding`` (the bench's own statements; seeding, resets and checks), ``cpu``
(who used the CPU), ``drivers`` (the claim/complete cycle over raw SQL and over HTTP),
``api_server`` (``activity-core serve`` as a child process), ``records`` (what a phase
measured), ``phases`` (each lettered phase), ``report`` (the printed lines and the summary)
and ``cli`` (the options and the run in order).
"""
