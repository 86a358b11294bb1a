"""Dependency aliases: the resources the lifespan created, injected into routers.

The providers are `async def` on purpose: FastAPI runs a plain `def` dependency in a thread
pool, and four thread hops per claim were a quarter of the API's CPU in the benchmark.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from ..artefacts.service import ArtefactService
from ..queue.service import QueueService
from ..settings import ActivityCoreSettings
from .auth import Authenticator, bearer_token
from .session import COOKIE_NAME, SessionSigner


async def _queue(request: Request) -> QueueService:
    service: QueueService = request.app.state.queue
    return service


async def _auth(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.auth
    return auth


async def _artefacts(request: Request) -> ArtefactService:
    settings: ActivityCoreSettings = request.app.state.settings
    return ArtefactService(request.app.state.pool, forgejo_web_base=settings.forgejo_web_base)


async def _settings(request: Request) -> ActivityCoreSettings:
    settings: ActivityCoreSettings = request.app.state.settings
    return settings


# Each kind of endpoint also reads the other kind's header: the Authenticator tells the
# kinds apart by the token itself, so a credential of the wrong kind is refused as
# `forbidden` whichever header carried it, rather than looking like no credential at all.


async def _worker_token(
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    x_worker_token: Annotated[str | None, Header(include_in_schema=False)] = None,
    x_operator_token: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> str | None:
    return x_worker_token or bearer_token(authorization) or x_operator_token


async def _operator_token(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    x_operator_token: Annotated[str | None, Header(include_in_schema=False)] = None,
    x_worker_token: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> str | None:
    return (
        x_operator_token
        or bearer_token(authorization)
        or _session_operator_token(request)
        or x_worker_token
    )


def _session_operator_token(request: Request) -> str | None:
    # The UI cookie is a signed session, never a token: one that verifies stands for the
    # configured operator token it was keyed from; anything else is no credential at all.
    sessions: SessionSigner | None = getattr(request.app.state, "sessions", None)
    if sessions is None or not sessions.verify(request.cookies.get(COOKIE_NAME)):
        return None
    settings: ActivityCoreSettings = request.app.state.settings
    return settings.operator_token


Queue = Annotated[QueueService, Depends(_queue)]
Artefacts = Annotated[ArtefactService, Depends(_artefacts)]
Auth = Annotated[Authenticator, Depends(_auth)]
Settings = Annotated[ActivityCoreSettings, Depends(_settings)]
WorkerToken = Annotated[str | None, Depends(_worker_token)]
OperatorToken = Annotated[str | None, Depends(_operator_token)]
