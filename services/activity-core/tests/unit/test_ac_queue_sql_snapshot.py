"""The final text of every claim and stale-lease statement, readable in the repository.

queries.py builds these from templates (the claimable scan with or without the stale
probe; the stale-lease transition with or without the claim path's batch bound), so what
PostgreSQL runs is written out in sql_snapshots/ and held to it here: a change to a
template shows up in review as a change to the statements themselves. After a deliberate
change, regenerate with `ACTIVITY_CORE_WRITE_SQL_SNAPSHOTS=1 uv run --frozen pytest
services/activity-core/tests/unit/test_ac_queue_sql_snapshot.py` and read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activity_core.queue import queries

SNAPSHOTS = Path(__file__).with_name("sql_snapshots")
STATEMENTS = {
    "claim": queries.CLAIM,
    "claim_unless_stale": queries.CLAIM_UNLESS_STALE,
    "claim_one_unless_stale": queries.CLAIM_ONE_UNLESS_STALE,
    "claim_many_unless_stale": queries.CLAIM_MANY_UNLESS_STALE,
    "reclaim_stale": queries.RECLAIM_STALE,
    "expire_leases": queries.EXPIRE_LEASES,
    "release_undelivered": queries.RELEASE_UNDELIVERED,
    "dispatch_claim": queries.DISPATCH_CLAIM,
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_each_rendered_statement_is_its_snapshot(name: str) -> None:
    path = SNAPSHOTS / f"{name}.sql"
    text = STATEMENTS[name].strip() + "\n"
    if os.environ.get("ACTIVITY_CORE_WRITE_SQL_SNAPSHOTS") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, (
        f"queries.py renders {name} differently from {path.name}; if that is intended, "
        "regenerate the snapshots (see this module's docstring) and review the diff"
    )


def test_every_snapshot_is_of_a_statement() -> None:
    assert {p.stem for p in SNAPSHOTS.glob("*.sql")} == set(STATEMENTS)
