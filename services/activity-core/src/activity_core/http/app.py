"""The application factory: settings in, a FastAPI app with its resources in the lifespan."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from activity_core.db.pool import open_pool
from activity_core.http.auth import (
    Authenticator,
    CredentialsFileError,
    MetricsTokenReused,
    load_operator_credentials,
    load_worker_credentials,
    token_digest,
)
from activity_core.http.body_guard import StrictJsonBody
from activity_core.http.credentials import CredentialTable
from activity_core.http.error_handlers import install_error_handlers
from activity_core.http.openapi import install_openapi
from activity_core.http.request_metrics import RequestMetrics
from activity_core.http.routes_automation_pause import router as automation_pause_router
from activity_core.http.routes_automations import router as automations_router
from activity_core.http.routes_changes import router as changes_router
from activity_core.http.routes_changes_upload import router as changes_upload_router
from activity_core.http.routes_fire import router as fire_router
from activity_core.http.routes_health import router as health_router
from activity_core.http.routes_operator import router as operator_router
from activity_core.http.routes_operator import runs_router as operator_runs_router
from activity_core.http.routes_publication import router as publication_router
from activity_core.http.routes_queue import router as queue_router
from activity_core.http.routes_ui import router as ui_router
from activity_core.http.routes_ui_actions import router as ui_actions_router
from activity_core.http.routes_ui_runs import router as ui_runs_router
from activity_core.http.worker_fast_path import WorkerFastPath
from activity_core.operator.actions import RunActions
from activity_core.operator.audit import AuditLog
from activity_core.operator.changes import ChangesReader
from activity_core.operator.sessions import UiSessions
from activity_core.operator.views import OperatorViews
from activity_core.queue.changes_retention import ChangesRetention
from activity_core.queue.metrics import QueueMetrics
from activity_core.queue.run_ages import RunAges
from activity_core.queue.service import QueueService
from activity_core.queue.sightings import ClaimSightings
from activity_core.queue.vacuum import QueueVacuum
from activity_core.queue.wakeups import OpenRunSignal
from activity_core.settings import ActivityCoreSettings, SettingsError
from activity_core.temporal.client import TemporalClientProvider

__all__ = ["build_authenticator", "create_app"]

log = logging.getLogger("activity_core")


# The variables a bad operators file, and a metrics token that is another's, are
# reported under.
OPERATORS_FILE_VARIABLE = "ACTIVITY_CORE_OPERATORS_FILE"
METRICS_TOKEN_VARIABLE = "ACTIVITY_CORE_METRICS_TOKEN"


def build_authenticator(settings: ActivityCoreSettings) -> Authenticator:
    """Raises CredentialsFileError for an unreadable or malformed worker credentials
    file, SettingsError (naming ACTIVITY_CORE_OPERATORS_FILE) for a bad operators file,
    or naming ACTIVITY_CORE_METRICS_TOKEN when it is an operator's or a worker's token."""
    workers: dict[str, str] = {}
    if settings.worker_credentials_file is not None:
        workers.update(load_worker_credentials(settings.worker_credentials_file))
    if settings.worker_token is not None and settings.worker_id is not None:
        workers[settings.worker_id] = token_digest(settings.worker_token)
    path = settings.operators_file
    try:
        operators = load_operator_credentials(path) if path is not None else {}
        return Authenticator(
            operator_token=settings.operator_token,
            workers=workers,
            allow_unauth=settings.allow_unauth_mutations,
            operators=operators,
            metrics_token=settings.metrics_token,
        )
    except CredentialsFileError as exc:
        raise SettingsError(f"{OPERATORS_FILE_VARIABLE}: {exc}") from exc
    except MetricsTokenReused as exc:
        raise SettingsError(f"{METRICS_TOKEN_VARIABLE}: {exc}") from None


def create_app(
    settings: ActivityCoreSettings,
    *,
    dsn: str,
    auth: Authenticator | None = None,
    worker_fast_path: bool = True,
) -> FastAPI:
    """Raises CredentialsFileError when no `auth` is given and the credentials file is bad.

    `worker_fast_path=False` serves every request through the FastAPI routes (the test
    that holds both doors to identical answers runs both)."""
    authenticator = auth if auth is not None else build_authenticator(settings)
    metrics = QueueMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for note in authenticator.startup_warnings():
            log.warning(note)
        pool = await open_pool(dsn, min_size=settings.db_pool_min, max_size=settings.db_pool_max)
        signal = OpenRunSignal(dsn)
        await signal.start()
        app.state.pool = pool
        # connects on the first manual fire, so the queue API starts while Temporal is down
        app.state.temporal = TemporalClientProvider(settings)
        sightings = ClaimSightings(pool)
        queue = QueueService(
            pool,
            max_attempts=settings.max_attempts,
            metrics=metrics,
            signal=signal,
            coalesce_max=settings.coalesce_max,
            sightings=sightings,
            changes_git_timeout_s=settings.changes_git_timeout_seconds,
        )
        app.state.queue = queue
        app.state.sightings = sightings
        app.state.audit = audit = AuditLog(pool)
        app.state.ui_sessions = UiSessions(pool)
        app.state.run_actions = RunActions(pool, queue=queue, audit=audit)
        app.state.changes_reader = ChangesReader(
            pool, deadline_s=settings.changes_view_deadline_seconds
        )
        app.state.operator_views = OperatorViews(
            pool, max_attempts=settings.max_attempts, sightings=sightings
        )
        vacuum = QueueVacuum(
            pool, dsn, dead_rows_limit=settings.queue_vacuum_dead_rows, metrics=metrics
        )
        vacuum.start()
        sightings.start()
        run_ages = RunAges(pool, metrics=metrics)
        run_ages.start()
        changes_retention = ChangesRetention(
            pool, retention_days=settings.changes_retention_days, metrics=metrics
        )
        changes_retention.start()
        app.state.changes_retention = changes_retention
        try:
            yield
        finally:
            await changes_retention.stop()
            await run_ages.stop()
            await sightings.stop()
            await vacuum.stop()
            await signal.stop()
            await pool.close()

    app = FastAPI(
        title="activity-core",
        version=importlib.metadata.version("activity-core"),
        summary="Claimable, leased, auditable ops runs for scheduled automations.",
        lifespan=lifespan,
        # /openapi.json only: FastAPI's /docs and /redoc pages load their scripts from a CDN
        docs_url=None,
        redoc_url=None,
        # FastAPI's native OpenTelemetry hooks look up the global providers (environment
        # reads) on every request; this service exports Prometheus metrics, not OTel.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.auth = authenticator
    app.state.metrics = metrics
    install_error_handlers(app)
    routers = (
        queue_router,
        changes_upload_router,
        operator_runs_router,
        operator_router,
        changes_router,
        automations_router,
        fire_router,
        publication_router,
        automation_pause_router,
        ui_router,
        ui_runs_router,
        ui_actions_router,
        health_router,
    )
    for router in routers:
        app.include_router(router)
    # the credential each route declares, for the body guard (it answers before routing)
    app.state.credential_table = CredentialTable.of(routers)
    install_openapi(app, routers)
    app.add_middleware(StrictJsonBody, max_bytes=settings.max_body_bytes)
    if worker_fast_path:
        # Added last, so it sees a request first: valid worker requests stop there.
        app.add_middleware(WorkerFastPath, max_bytes=settings.max_body_bytes)
    # Outermost, so every answer is counted, the fast path's and the body guard's too.
    app.add_middleware(RequestMetrics, metrics=metrics, routers=routers)
    return app
