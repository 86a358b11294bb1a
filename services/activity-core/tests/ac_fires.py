"""Test support for run artefacts: automations, their fires (activity_runs) and ops runs,
written directly so a test controls every key, timestamp and stored result."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from ac_testkit import insert_ops_run

T0 = datetime.fromisoformat("2024-05-01T06:00:00+00:00")


# The harness's account of itself in a run's execution evidence: what a test's completion
# sends and the run views show back beside the outcome.
HARNESS_EVIDENCE = {
    "profile_ref": "harness.agent-dev@1.0.0",
    "rein_id": "rein-aharness",
    "rein_version": "0.1.0",
    "resolved_model": "claude-sonnet-4-6",
    "sandbox_profile": "profile.bwrap-local",
}


def at(seconds: float) -> datetime:
    """A fixed instant `seconds` after T0, so windows in tests are exact."""
    return T0 + timedelta(seconds=seconds)


class SeededAutomations:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self._n = 0

    async def automation(
        self,
        slug: str,
        title: str | None = None,
        *,
        cron: str | None = None,
        timezone: str | None = None,
        paused: bool = False,
        definition: dict[str, Any] | None = None,
    ) -> uuid.UUID:
        ident = uuid.uuid5(uuid.NAMESPACE_URL, f"activity-core-test:{slug}")
        await self.conn.execute(
            """INSERT INTO activity_definitions
                   (id, slug, title, definition, schedule_cron, schedule_timezone, paused,
                    content_digest)
               VALUES ($1, $2, $3, $4, $5, $6, $7, 'x')""",
            ident,
            slug,
            title or slug,
            definition or {"id": slug},
            cron,
            timezone,
            paused,
        )
        return ident

    async def fire(
        self,
        automation: uuid.UUID,
        *,
        started_at: datetime,
        finished_at: datetime | None = None,
        run_id: str | None = None,
        trigger_key: str = "manual",
        triggering_event_id: str | None = None,
        scheduled_for: datetime | None = None,
        status: str | None = None,
        context: dict[str, Any] | None = None,
    ) -> tuple[uuid.UUID, str]:
        """An activity_run; returns (its UUID, its run id)."""
        ident = uuid.uuid4()
        run = run_id or f"run-{ident}"
        await self.conn.execute(
            """INSERT INTO activity_runs
                   (id, activity_definition_id, workflow_id, run_id, trigger_key,
                    triggering_event_id, scheduled_for, context, status, emitted_count,
                    started_at, finished_at)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1, $10, $11)""",
            ident,
            automation,
            f"wf-{ident}",
            run,
            trigger_key,
            triggering_event_id or run,
            scheduled_for,
            context or {},
            status or ("emitted" if finished_at else "started"),
            started_at,
            finished_at,
        )
        return ident, run

    async def ops_run(
        self,
        automation: uuid.UUID,
        *,
        triggering_event_id: str,
        created_at: datetime,
        state: str = "open",
        result: Any = None,
        **columns: Any,
    ) -> uuid.UUID:
        self._n += 1
        ident = uuid.uuid4()
        values: dict[str, Any] = {
            "id": ident,
            "activity_definition_id": automation,
            "idempotency_key": f"k:{ident}",
            "target_repo": "research/briefs",
            "title": f"ops run {self._n}",
            "description": "seeded",
            "labels": ["automated"],
            "priority": "medium",
            "state": state,
            "source_type": "rule",
            "source_id": "daily-brief",
            "triggering_event_id": triggering_event_id,
            "harness_profile_ref": "harness.agent-dev@1.0.0",
            "result": result,
            "created_at": created_at,
            "updated_at": created_at,
        }
        if state == "claimed":
            values["claim_owner"] = "rein-aharness@test01"
            values["lease_until"] = datetime.now().astimezone() + timedelta(minutes=10)
            values["attempt"] = 1
        values.update(columns)
        await insert_ops_run(self.conn, values)
        return ident


def completed_result(
    *,
    path: str = "briefs/2024-05-01.md",
    head_after: str = "0123456789abcdef0123456789abcdef01234567",
    target_repo: str = "research/briefs",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "ok": True,
        "path": path,
        "head_after": head_after,
        "target_repo": target_repo,
        "committed": True,
        "execution_evidence": {
            "request_id": "req-1",
            "contract_version": "1.0",
            **HARNESS_EVIDENCE,
            "outcome": "succeeded",
            "tokens_spent": 321,
        },
        **extra,
    }
