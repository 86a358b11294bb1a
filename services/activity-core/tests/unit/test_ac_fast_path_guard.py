"""The worker fast path answers the four hottest endpoints without FastAPI, so it must do
everything their routes and the middleware inside it would do. This holds the app to what
the fast path assumes: adding a dependency or a parameter to a worker route, changing its
body or response model, or adding a middleware inside the fast path fails here, instead of
silently skipping that code for valid worker requests."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute

from ac_testkit import settings_env
from activity_core.http import credentials, deps, routes_queue
from activity_core.http.app import create_app
from activity_core.http.body_guard import StrictJsonBody
from activity_core.http.request_metrics import RequestMetrics
from activity_core.http.worker_fast_path import WorkerFastPath, match_worker_path
from activity_core.http.worker_ops import CLAIM, RUN_ENDPOINTS
from activity_core.settings import load_settings

# route name -> what the fast path replays of it: its endpoint, and the path it matches
WORKER_ROUTES = {
    "claim": (CLAIM, "/ops-runs/claim"),
    "heartbeat": (RUN_ENDPOINTS["heartbeat"], "/ops-runs/{run_id}/heartbeat"),
    "complete": (RUN_ENDPOINTS["complete"], "/ops-runs/{run_id}/complete"),
    "fail": (RUN_ENDPOINTS["fail"], "/ops-runs/{run_id}/fail"),
}
# Everything the fast path does itself for such a request: the credential check (inside
# the operation, deps.worker_call) and the call's resources.
FAST_PATH_DEPENDENCIES = [credentials.WORKER_CREDENTIAL.dependency, deps._worker_call]


def _calls(dependant: Any) -> list[Any]:
    found: list[Any] = []
    for sub in dependant.dependencies:
        found.append(sub.call)
        found.extend(_calls(sub))
    return found


def test_each_worker_route_takes_only_what_the_fast_path_replays() -> None:
    routes = {
        r.name: r
        for r in routes_queue.router.routes
        if isinstance(r, APIRoute) and r.name in WORKER_ROUTES
    }
    assert set(routes) == set(WORKER_ROUTES)
    for name, route in routes.items():
        endpoint, path = WORKER_ROUTES[name]
        assert route.path == path and route.methods == {"POST"}, name
        assert endpoint.route == path, name  # the request metrics' route label
        assert _calls(route.dependant) == FAST_PATH_DEPENDENCIES, name
        assert [p.name for p in route.dependant.body_params] == ["body"], name
        assert route.dependant.body_params[0].field_info.annotation is endpoint.body_model, name
        assert route.response_model is endpoint.response_model, name
        expected_path_params = ["run_id"] if "{run_id}" in path else []
        assert [p.name for p in route.dependant.path_params] == expected_path_params, name
        for kind in ("query_params", "header_params", "cookie_params"):
            assert getattr(route.dependant, kind) == [], (name, kind)
        concrete = path.replace("{run_id}", "0b7e4c2a-6f1d-4d8e-9a3b-5c7d9e1f2a4b")
        matched = match_worker_path(concrete)
        assert matched is not None and matched[0] is endpoint, name


def test_nothing_but_the_body_guard_sits_inside_the_fast_path() -> None:
    app = create_app(load_settings(**settings_env()), dsn="postgresql://unused@127.0.0.1:1/x")
    # user_middleware is outermost first: what comes after the fast path never sees a
    # request it answers, so it must be only the body guard, whose checks it shares.
    order: list[object] = [m.cls for m in app.user_middleware]
    assert order == [RequestMetrics, WorkerFastPath, StrictJsonBody]
