"""Test support for activity-core: tokens, an app client, and seeded queue rows."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import httpx

from activity_core.http.app import create_app
from activity_core.settings import load_settings
from ops_testsupport.lifespan import running

OPERATOR_TOKEN = "operator-token-0123456789abcdef"
WORKER_TOKEN = "worker-token-0123456789abcdef"
WORKER_ID = "rein-aharness@test01"

# A fault on the audit write: every insert into ops_audit fails as on a database without
# room (disk_full, a 53xxx the app answers 503 unavailable). Created and dropped by a test
# in its own database.
REFUSE_AUDIT = """
CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'no room for the audit entry' USING ERRCODE = 'disk_full'; END $$;
CREATE TRIGGER refuse_audit BEFORE INSERT ON ops_audit
    FOR EACH ROW EXECUTE FUNCTION refuse_audit();
"""
# The same fault at COMMIT: the insert is taken, the transaction then fails to commit.
REFUSE_AUDIT_AT_COMMIT = """
CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'no room for the audit entry' USING ERRCODE = 'disk_full'; END $$;
CREATE CONSTRAINT TRIGGER refuse_audit AFTER INSERT ON ops_audit
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_audit();
"""
ALLOW_AUDIT = "DROP TRIGGER refuse_audit ON ops_audit; DROP FUNCTION refuse_audit();"


@asynccontextmanager
async def audit_refused(
    db: asyncpg.Connection | asyncpg.Pool, fault: str = REFUSE_AUDIT
) -> AsyncIterator[None]:
    """Inside the block every audit write fails with `fault` (REFUSE_AUDIT, or
    REFUSE_AUDIT_AT_COMMIT); after it, ALLOW_AUDIT."""
    await db.execute(fault)
    try:
        yield
    finally:
        await db.execute(ALLOW_AUDIT)


def settings_env(**overrides: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "ACTIVITY_CORE_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "ACTIVITY_CORE_WORKER_TOKEN": WORKER_TOKEN,
        "ACTIVITY_CORE_WORKER_ID": WORKER_ID,
        "ACTIVITY_CORE_DB_POOL_MIN": 1,
        "ACTIVITY_CORE_DB_POOL_MAX": 10,
    }
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


@asynccontextmanager
async def running_app(
    dsn: str, *, worker_fast_path: bool = True, **env: Any
) -> AsyncIterator[AppClient]:
    """An app on `dsn` with its lifespan running, and an httpx client bound to it; both
    closed when the block ends."""
    settings = load_settings(**settings_env(**env))
    app = create_app(settings, dsn=dsn, worker_fast_path=worker_fast_path)
    async with (
        running(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://activity-core.test"
        ) as client,
    ):
        yield AppClient(app, client, settings.worker_token)


class AppClient:
    """An app instance with its lifespan running, and an httpx client bound to it."""

    def __init__(
        self, app: Any, client: httpx.AsyncClient, worker_token: str | None = WORKER_TOKEN
    ) -> None:
        self.app = app
        self.http = client
        self.worker_token = worker_token

    def worker_headers(self, token: str | None = None) -> dict[str, str]:
        token = token or self.worker_token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def operator_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}

    async def pages(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """Every page of the operator listing at `path` with `params`, following
        `next_cursor` until a page has none: each page's body, in order."""
        bodies: list[dict[str, Any]] = []
        cursor = None
        while True:
            query = {**params, **({"cursor": cursor} if cursor else {})}
            response = await self.http.get(path, params=query, headers=self.operator_headers())
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            bodies.append(body)
            cursor = body["next_cursor"]
            if cursor is None:
                return bodies

    async def claim(self, worker_id: str = WORKER_ID, **body: Any) -> httpx.Response:
        return await self.http.post(
            "/ops-runs/claim",
            json={"worker_id": worker_id, **body},
            headers=self.worker_headers(),
        )

    async def complete(
        self, run_id: Any, result: Any, worker_id: str = WORKER_ID
    ) -> httpx.Response:
        return await self.http.post(
            f"/ops-runs/{run_id}/complete",
            json={"worker_id": worker_id, "result": result},
            headers=self.worker_headers(),
        )

    async def fail(self, run_id: Any, worker_id: str = WORKER_ID, **body: Any) -> httpx.Response:
        return await self.http.post(
            f"/ops-runs/{run_id}/fail",
            json={"worker_id": worker_id, **body},
            headers=self.worker_headers(),
        )

    async def upload_changes(
        self,
        run_id: Any,
        bundle: bytes,
        *,
        attempt: int = 1,
        worker_id: str = WORKER_ID,
        digest: str | None = None,
        content_type: str | None = "application/x-git-bundle",
    ) -> httpx.Response:
        """PUT /ops-runs/{run_id}/changes; `digest` defaults to the body's own."""
        headers = self.worker_headers()
        headers["X-Changes-Digest"] = digest or "sha256:" + hashlib.sha256(bundle).hexdigest()
        if content_type is not None:
            headers["Content-Type"] = content_type
        return await self.http.put(
            f"/ops-runs/{run_id}/changes",
            params={"worker_id": worker_id, "attempt": attempt},
            content=bundle,
            headers=headers,
        )

    async def heartbeat(
        self, run_id: Any, worker_id: str = WORKER_ID, **body: Any
    ) -> httpx.Response:
        return await self.http.post(
            f"/ops-runs/{run_id}/heartbeat",
            json={"worker_id": worker_id, **body},
            headers=self.worker_headers(),
        )


async def insert_ops_run(conn: asyncpg.Connection, values: dict[str, Any]) -> None:
    """One ops_runs row of `values` (column: value), written directly."""
    names = ", ".join(values)
    params = ", ".join(f"${i}" for i in range(1, len(values) + 1))
    await conn.execute(f"INSERT INTO ops_runs ({names}) VALUES ({params})", *values.values())


DEFINITION_ID = uuid.UUID("00000000-0000-4000-8000-00000000d001")


class SeededQueue:
    """Writes queue rows directly, the way emission will, so tests control every field."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self._definition_ready = False
        self._counter = 0

    async def definition(self) -> uuid.UUID:
        if not self._definition_ready:
            await self.conn.execute(
                """INSERT INTO activity_definitions (id, slug, title, definition, content_digest)
                   VALUES ($1, 'test-activity', 'Test activity', '{}'::jsonb, 'x')
                   ON CONFLICT (id) DO NOTHING""",
                DEFINITION_ID,
            )
            self._definition_ready = True
        return DEFINITION_ID

    async def run(
        self,
        *,
        labels: list[str] | None = None,
        priority: str = "medium",
        created_at: datetime | None = None,
        repository_grant: dict[str, Any] | None = None,
        harness_profile_ref: str | None = "harness.agent-dev@1.0.0",
        target_repo: str = "research/briefs",
        **columns: Any,
    ) -> uuid.UUID:
        definition_id = await self.definition()
        self._counter += 1
        run_id = uuid.uuid4()
        created = created_at or (datetime.now().astimezone() - timedelta(hours=1))
        values: dict[str, Any] = {
            "id": run_id,
            "activity_definition_id": definition_id,
            "idempotency_key": f"test-activity:rule:{run_id}",
            "target_repo": target_repo,
            "title": f"run {self._counter}",
            "description": "seeded by a test",
            "labels": labels if labels is not None else ["automated"],
            "priority": priority,
            "source_type": "rule",
            "source_id": "rule-1",
            "triggering_event_id": f"scheduled:{created.isoformat()}",
            "harness_profile_ref": harness_profile_ref,
            "repository_grant": repository_grant,
            "created_at": created,
            "updated_at": created,
        }
        values.update(columns)
        await insert_ops_run(self.conn, values)
        return run_id

    async def claimed(
        self, lease: timedelta, *, owner: str = WORKER_ID, attempt: int = 1, **columns: Any
    ) -> uuid.UUID:
        """A run claimed by `owner` at `attempt`, its lease ending `lease` from now (negative:
        ended that long ago)."""
        return await self.run(
            state="claimed",
            claim_owner=owner,
            lease_until=datetime.now().astimezone() + lease,
            attempt=attempt,
            **columns,
        )

    async def runs(self, n: int, **kwargs: Any) -> list[uuid.UUID]:
        base = datetime.now().astimezone() - timedelta(days=1)
        return [
            await self.run(created_at=base + timedelta(milliseconds=i), **kwargs) for i in range(n)
        ]

    async def row(self, run_id: uuid.UUID) -> asyncpg.Record:
        row = await self.conn.fetchrow("SELECT * FROM ops_runs WHERE id = $1", run_id)
        assert row is not None
        return row

    async def expire_lease(self, run_id: uuid.UUID) -> None:
        await self.conn.execute(
            "UPDATE ops_runs SET lease_until = now() - interval '1 second' WHERE id = $1", run_id
        )


async def run_rows(db: asyncpg.Connection) -> dict[uuid.UUID, dict[str, Any]]:
    """Every ops run, whole, by id: what a refusal must leave as it was."""
    return {r["id"]: dict(r) for r in await db.fetch("SELECT * FROM ops_runs")}


def refusal_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The refusal's body, after asserting its status and machine code."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    return body
