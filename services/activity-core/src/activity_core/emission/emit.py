"""`emit_tasks`: one fire of a definition becomes ops runs and audit rows, in one transaction.

The spec's emit path, with the IssueSink write made a step of its own:

1. Validate the whole batch (every rule and instruction) and render every task before
   the database is touched. A problem refuses the batch (EmissionPolicyError,
   non-retryable) and nothing of it is emitted.
2. In one transaction, per item in file order (rules, then instructions):
   a. when the queue is enabled, insert the ops run as ``open``, idempotent on
      ``{activity_id}:{source_id}:{triggering_event_id}``; its insert trigger NOTIFYs
      long-poll claimers;
   b. write the ``task_spawn_log`` audit row, carrying the IssueSink write it owes
      (``sink_status`` ``pending`` with the task as ``sink_payload``);
   then mark the fire's ``activity_runs`` row ``emitted``. Every item gets its ops run
   and its audit row, or none does (a database failure rolls the whole batch back and
   the retry starts over).
3. ``publish.publish_pending`` dual-writes the IssueSink afterwards, retried on its own:
   a sink that is down never stands between a fire and its ops runs, and never keeps a
   later item of the batch from its run.

Outcomes: ``created`` (this emit created the run, or completed a run an older build
inserted and then failed at the sink), ``duplicate`` (an earlier emit of the key
completed: no sink write of its own), ``queue_disabled`` (no run; the sink is still
written), ``report_only`` (a report-only instruction: no run, no sink, the audit row only).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, TypeAlias

import asyncpg

from activity_core.db.unavailable import is_unavailable
from activity_core.definitions.model import ActivityDefinitionSpec, TaskSource
from activity_core.emission import queries
from activity_core.emission.errors import (
    DefinitionNotSyncedError,
    EmissionPolicyError,
    EmissionUnavailable,
    PolicyProblem,
)
from activity_core.emission.fire import FireContext
from activity_core.emission.policy import check_batch
from activity_core.emission.render import RenderError, render_task
from activity_core.emission.sink import NONE_SINK, SinkTask

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

__all__ = [
    "EmissionPolicyError",
    "EmitReport",
    "EmittedItem",
    "FireContext",
    "SpawnOutcome",
    "emit_tasks",
    "idempotency_key",
]

log = logging.getLogger("activity_core.emission")

if TYPE_CHECKING:  # PoolConnectionProxy is generic only in the stubs
    Connection: TypeAlias = asyncpg.Connection | PoolConnectionProxy[asyncpg.Record]


class SpawnOutcome(StrEnum):
    created = "created"
    duplicate = "duplicate"
    queue_disabled = "queue_disabled"
    report_only = "report_only"


@dataclass(frozen=True, slots=True)
class EmittedItem:
    source_type: str
    source_id: str
    idempotency_key: str
    outcome: SpawnOutcome
    ops_run_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class EmitReport:
    activity_id: str
    triggering_event_id: str
    items: tuple[EmittedItem, ...]
    # sink writes still to do for this fire's keys (its own, and an earlier emit's
    # pending or failed ones): the publish step runs when this is not 0
    sink_writes_left: int

    def count(self, outcome: SpawnOutcome) -> int:
        return sum(1 for item in self.items if item.outcome is outcome)

    @property
    def emitted_count(self) -> int:
        """Tasks this fire put in the queue or the sink, counting runs an earlier emit of
        the same fire already created (so a replay reports the same number)."""
        return sum(1 for item in self.items if item.outcome is not SpawnOutcome.report_only)


def idempotency_key(activity_id: str, source_id: str, triggering_event_id: str) -> str:
    return f"{activity_id}:{source_id}:{triggering_event_id}"


@dataclass(frozen=True, slots=True)
class _Planned:
    source: TaskSource
    key: str
    task: SinkTask | None  # None for report-only items


def _plan(
    spec: ActivityDefinitionSpec, sources: Sequence[TaskSource], fire: FireContext
) -> list[_Planned]:
    """Render every item up front, so a template that cannot render refuses the batch."""
    timezone = spec.schedule.timezone if spec.schedule else None
    planned: list[_Planned] = []
    problems: list[PolicyProblem] = []
    for source in sources:
        key = idempotency_key(spec.id, source.source_id, fire.triggering_event_id)
        if source.report_only:
            planned.append(_Planned(source, key, None))
            continue
        action = source.action
        try:
            rendered = render_task(
                action, activity_id=spec.id, title=spec.title, fire=fire, timezone=timezone
            )
        except RenderError as exc:
            problems.append(PolicyProblem(source.field_path, str(exc)))
            continue
        assert action.target_repo is not None  # the policy check refused it otherwise
        grant = action.repository_grant
        planned.append(
            _Planned(
                source,
                key,
                SinkTask(
                    idempotency_key=key,
                    activity_id=spec.id,
                    activity_definition_id=spec.uuid,
                    activity_run_id=fire.activity_run_id,
                    run_id=fire.run_id,
                    source_type=source.source_type.value,
                    source_id=source.source_id,
                    triggering_event_id=fire.triggering_event_id,
                    ops_run_id=None,
                    title=rendered.title,
                    description=rendered.description,
                    target_repo=action.target_repo,
                    labels=list(action.labels),
                    priority=action.priority.value,
                    harness_profile_ref=action.harness_profile_ref,
                    approach_hint=action.approach_hint,
                    execution_refs=dict(rendered.execution_refs),
                    # as admitted: never rendered, never merged into execution_refs
                    repository_grant=grant.as_admitted() if grant is not None else None,
                ),
            )
        )
    if problems:
        raise EmissionPolicyError(spec.id, problems)
    return planned


async def emit_tasks(
    pool: asyncpg.Pool,
    sink_name: str,
    *,
    spec: ActivityDefinitionSpec,
    fire: FireContext,
    queue_enabled: bool,
    require_profile: bool,
) -> EmitReport:
    """Emit one fire of ``spec`` (see the module docstring). ``sink_name`` is the IssueSink
    the audit rows record (``none``: no sink write is owed).

    Raises EmissionPolicyError (nothing written; final) or EmissionUnavailable (nothing
    written; retry the whole call, it is idempotent).
    """
    sources = check_batch(spec, fire=fire, require_profile=require_profile)
    planned = _plan(spec, sources, fire)
    keys = [plan.key for plan in planned]
    try:
        async with pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval(queries.DEFINITION_EXISTS, spec.uuid):
                raise DefinitionNotSyncedError(spec.id)
            await conn.execute(queries.LOCK_KEYS, queries.EMIT_LOCK_NAMESPACE, keys)
            items = [
                await _emit_one(conn, sink_name, spec, fire, plan, queue_enabled)
                for plan in planned
            ]
            report = EmitReport(spec.id, fire.triggering_event_id, tuple(items), 0)
            if fire.activity_run_id is not None:
                await conn.execute(
                    queries.MARK_FIRE_EMITTED, fire.activity_run_id, report.emitted_count
                )
            left = await conn.fetchval(queries.SINK_WRITES_LEFT, keys)
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        raise EmissionUnavailable(f"database unavailable: {type(exc).__name__}") from exc
    report = replace(report, sink_writes_left=int(left))
    log.info(
        "emitted %d task(s), %d new, %d sink write(s) to do",
        report.emitted_count,
        report.count(SpawnOutcome.created),
        report.sink_writes_left,
        extra={"activity_id": spec.id, "trigger": fire.triggering_event_id, "run_id": fire.run_id},
    )
    return report


async def _emit_one(
    conn: Connection,
    sink_name: str,
    spec: ActivityDefinitionSpec,
    fire: FireContext,
    plan: _Planned,
    queue_enabled: bool,
) -> EmittedItem:
    source = plan.source
    task = plan.task
    if task is None:
        return await _audit(conn, sink_name, spec, fire, plan, SpawnOutcome.report_only, None)
    if not queue_enabled:
        return await _audit(
            conn, sink_name, spec, fire, plan, SpawnOutcome.queue_disabled, None, task
        )
    run_id = await conn.fetchval(
        queries.INSERT_OPS_RUN,
        uuid.uuid4(),
        spec.uuid,
        plan.key,
        task.target_repo,
        task.title,
        task.description,
        task.labels,
        task.priority,
        source.source_type.value,
        source.source_id,
        fire.triggering_event_id,
        task.approach_hint,
        task.harness_profile_ref,
        task.execution_refs,
        task.repository_grant,
    )
    if run_id is None:
        run_id = await conn.fetchval(queries.RUN_BY_KEY, plan.key)
        if await conn.fetchval(queries.CREATED_AUDIT_EXISTS, plan.key):
            return await _audit(conn, sink_name, spec, fire, plan, SpawnOutcome.duplicate, run_id)
    return await _audit(
        conn,
        sink_name,
        spec,
        fire,
        plan,
        SpawnOutcome.created,
        run_id,
        replace(task, ops_run_id=run_id),
    )


async def _audit(
    conn: Connection,
    sink_name: str,
    spec: ActivityDefinitionSpec,
    fire: FireContext,
    plan: _Planned,
    outcome: SpawnOutcome,
    run_id: uuid.UUID | None,
    sink_task: SinkTask | None = None,
) -> EmittedItem:
    """The audit row; with ``sink_task``, the sink write it owes (unless the sink is none)."""
    source = plan.source
    owes_write = sink_task is not None and sink_name != NONE_SINK
    await conn.execute(
        queries.INSERT_AUDIT,
        spec.uuid,
        fire.activity_run_id,
        source.source_type.value,
        source.source_id,
        fire.triggering_event_id,
        plan.key,
        run_id,
        outcome.value,
        sink_name,
        "pending" if owes_write else "none",
        sink_task.payload() if owes_write and sink_task is not None else None,
    )
    return EmittedItem(source.source_type.value, source.source_id, plan.key, outcome, run_id)
