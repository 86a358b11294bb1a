"""The app's routers, for the tests that hold every route to a rule (its credential, its
place in the OpenAPI document): the JSON API's, which the document describes, and the ops
UI's, which it does not."""

from __future__ import annotations

from fastapi import APIRouter

from activity_core.http import (
    routes_automation_pause,
    routes_automations,
    routes_changes,
    routes_changes_upload,
    routes_fire,
    routes_health,
    routes_operator,
    routes_publication,
    routes_queue,
    routes_ui,
    routes_ui_actions,
    routes_ui_runs,
)

__all__ = ["APP_ROUTERS", "JSON_ROUTERS", "UI_ROUTERS"]

# In the order the app includes them: its credential table keeps that order.
APP_ROUTERS: tuple[APIRouter, ...] = (
    routes_queue.router,
    routes_changes_upload.router,
    routes_operator.runs_router,
    routes_operator.router,
    routes_changes.router,
    routes_automations.router,
    routes_fire.router,
    routes_publication.router,
    routes_automation_pause.router,
    routes_ui.router,
    routes_ui_runs.router,
    routes_ui_actions.router,
    routes_health.router,
)
UI_ROUTERS: tuple[APIRouter, ...] = (
    routes_ui.router,
    routes_ui_runs.router,
    routes_ui_actions.router,
)
JSON_ROUTERS: tuple[APIRouter, ...] = tuple(r for r in APP_ROUTERS if r not in UI_ROUTERS)
