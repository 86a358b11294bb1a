"""The few operator calls the demo (and the end-to-end suite) make to activity-core."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["ApiError", "OpsApi"]


class ApiError(Exception):
    """activity-core answered something else than the call expects (one line)."""


class OpsApi:
    def __init__(self, base_url: str, operator_token: str, *, timeout: float = 15.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {operator_token}"},
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpsApi:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def fire(self, automation: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Manual fire; `{"workflow_id", "run_id", "trigger_key"}`."""
        response = self._http.post(
            f"/ops/automations/{quote(automation, safe='')}/fire", json=body or {}
        )
        return _json(response, 202, f"fire {automation}")

    def fire_detail(self, automation: str, run_id: str) -> dict[str, Any] | None:
        """The fire and its ops runs (`GET /ops/automations/{id}/runs/{run_id}`); None
        while the fire is not recorded yet."""
        response = self._http.get(
            f"/ops/automations/{quote(automation, safe='')}/runs/{quote(run_id, safe='')}"
        )
        if response.status_code == 404:
            return None
        return _json(response, 200, f"run {run_id} of {automation}")

    def ops_run(self, ops_run_id: str) -> dict[str, Any]:
        response = self._http.get(f"/ops-runs/{quote(ops_run_id, safe='')}")
        return _json(response, 200, f"ops run {ops_run_id}")


def _json(response: httpx.Response, status: int, what: str) -> dict[str, Any]:
    if response.status_code != status:
        code = ""
        try:
            body = response.json()
            if isinstance(body, dict):
                code = f" {body.get('code')}: {body.get('detail')}"
        except ValueError:
            pass
        raise ApiError(f"{what}: activity-core answered {response.status_code}{code}")
    body = response.json()
    if not isinstance(body, dict):
        raise ApiError(f"{what}: activity-core answered a body that is not an object")
    return body
