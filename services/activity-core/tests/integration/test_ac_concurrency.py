"""32 concurrent claimers on two app instances over 2,000 runs: each claimed exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from ac_testkit import SeededQueue

RUNS = 2000
CLAIMERS = 32


async def test_every_run_is_claimed_exactly_once(app_factory: Any, seeded: SeededQueue) -> None:
    replicas = [await app_factory(ACTIVITY_CORE_DB_POOL_MAX=16) for _ in range(2)]
    definition = await seeded.definition()
    await seeded.conn.execute(
        """
        INSERT INTO ops_runs (id, activity_definition_id, idempotency_key, target_repo, title,
                              source_type, source_id, triggering_event_id, priority, created_at)
        SELECT gen_random_uuid(), $1, 'bulk:' || g, 'research/briefs', 'run ' || g,
               'rule', 'rule-1', 'bulk:' || g,
               (ARRAY['low','medium','high'])[1 + g % 3],
               now() - make_interval(secs => g)
        FROM generate_series(1, $2) AS g
        """,
        definition,
        RUNS,
    )
    claimed: Counter[str] = Counter()
    completed: Counter[str] = Counter()

    async def claimer(index: int) -> None:
        api = replicas[index % 2]
        while True:
            response = await api.claim(limit=1 + index % 3)
            assert response.status_code == 200, response.text
            runs = response.json()["runs"]
            if not runs:
                return
            for run in runs:
                claimed[run["id"]] += 1
                closed = await api.complete(run["id"], {"ok": True})
                assert closed.status_code == 200, closed.text
                assert closed.json()["close_disposition"] == "applied"
                completed[run["id"]] += 1

    await asyncio.gather(*(claimer(i) for i in range(CLAIMERS)))

    assert len(claimed) == RUNS
    assert set(claimed.values()) == {1}
    assert set(completed.values()) == {1}
    counts = await seeded.conn.fetch("SELECT state, count(*) FROM ops_runs GROUP BY state")
    assert {r["state"]: r["count"] for r in counts} == {"succeeded": RUNS}
    attempts = await seeded.conn.fetchval("SELECT max(attempt) FROM ops_runs")
    assert attempts == 1
