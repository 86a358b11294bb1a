"""Dependency aliases: the resources the lifespan created, injected into routers.

The providers are `async def` on purpose: FastAPI runs a plain `def` dependency in a thread
pool, and four thread hops per claim were a quarter of the API's CPU in the benchmark.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Request

from activity_core.artefacts.service import ArtefactService
from activity_core.db.pool import Pool
from activity_core.http.auth import Authenticator, bearer_token
from activity_core.http.operator_context import actor_of
from activity_core.operator.actions import RunActions
from activity_core.operator.audit import Actor, AuditLog
from activity_core.operator.changes import ChangesReader
from activity_core.operator.views import OperatorViews
from activity_core.queue.service import QueueService
from activity_core.settings import ActivityCoreSettings
from activity_core.temporal.client import TemporalClientProvider

__all__ = [
    "Acting",
    "Actions",
    "Artefacts",
    "Audit",
    "Changes",
    "Database",
    "Queue",
    "Settings",
    "Temporal",
    "Views",
    "Worker",
    "WorkerCall",
    "operator_token_of",
    "worker_call",
    "worker_token_of",
]


_T = TypeVar("_T")


async def _artefacts(request: Request) -> ArtefactService:
    settings: ActivityCoreSettings = request.app.state.settings
    return ArtefactService(request.app.state.pool, forgejo_web_base=settings.forgejo_web_base)


def _from_state(name: str, kind: type[_T]) -> Callable[[Request], Awaitable[_T]]:
    """The provider of what the lifespan put in `app.state.<name>` (a `kind`)."""

    async def provide(request: Request) -> _T:
        value: _T = getattr(request.app.state, name)
        return value

    provide.__name__ = f"_{name}"
    return provide


_settings = _from_state("settings", ActivityCoreSettings)


# Each kind of endpoint also reads the other kind's header: the Authenticator tells the
# kinds apart by the token itself, so a credential of the wrong kind is refused as
# `forbidden` whichever header carried it, rather than looking like no credential at all.
# Headers are read from the request, not declared as `Header()` parameters: FastAPI
# re-inspects each declared parameter's annotation on every request, which cost more CPU
# per claim than the queue's own code (benchmark profile).


def _token_of(request: Request, own_header: str, other_header: str) -> str | None:
    headers = request.headers
    return (
        headers.get(own_header)
        or bearer_token(headers.get("authorization"))
        or headers.get(other_header)
    )


def worker_token_of(request: Request) -> str | None:
    return _token_of(request, "x-worker-token", "x-operator-token")


def operator_token_of(request: Request) -> str | None:
    return _token_of(request, "x-operator-token", "x-worker-token")


async def _operator_token(request: Request) -> str | None:
    return operator_token_of(request)


@dataclass(frozen=True)
class WorkerCall:
    """Everything a worker endpoint needs besides its body and path, as one dependency:
    the claim/close hot path pays FastAPI's per-dependency cost once, not four times."""

    queue: QueueService
    auth: Authenticator
    token: str | None
    default_lease_seconds: int

    def worker_id(self, body_worker_id: str) -> str:
        """The authenticated worker identity; the body's worker_id must be exactly it."""
        return self.auth.require_worker(self.token, body_worker_id)


def worker_call(request: Request) -> WorkerCall:
    state = request.app.state
    settings: ActivityCoreSettings = state.settings
    return WorkerCall(
        queue=state.queue,
        auth=state.auth,
        token=worker_token_of(request),
        default_lease_seconds=settings.lease_seconds,
    )


async def _worker_call(request: Request) -> WorkerCall:
    return worker_call(request)


async def _actor(request: Request) -> Actor:
    return actor_of(request)


Queue = Annotated[QueueService, Depends(_from_state("queue", QueueService))]
Actions = Annotated[RunActions, Depends(_from_state("run_actions", RunActions))]
Views = Annotated[OperatorViews, Depends(_from_state("operator_views", OperatorViews))]
Audit = Annotated[AuditLog, Depends(_from_state("audit", AuditLog))]
Changes = Annotated[ChangesReader, Depends(_from_state("changes_reader", ChangesReader))]
# The operator acting (the principal OPERATOR_CREDENTIAL authenticated) and the request id.
Acting = Annotated[Actor, Depends(_actor)]
Artefacts = Annotated[ArtefactService, Depends(_artefacts)]
Auth = Annotated[Authenticator, Depends(_from_state("auth", Authenticator))]
Settings = Annotated[ActivityCoreSettings, Depends(_settings)]
OperatorToken = Annotated[str | None, Depends(_operator_token)]
Worker = Annotated[WorkerCall, Depends(_worker_call)]
# The pool and the Temporal client, for a route whose unit of work spans both (fire, publish).
Database = Annotated[Pool, Depends(_from_state("pool", Pool))]
Temporal = Annotated[
    TemporalClientProvider, Depends(_from_state("temporal", TemporalClientProvider))
]
