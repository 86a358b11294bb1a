"""The one way rein-aharness builds an HTTP client for a peer (activity-core, remote Glas)."""

from __future__ import annotations

import httpx

__all__ = ["USER_AGENT", "build_http_client"]

USER_AGENT = "rein-aharness/0.1"


def build_http_client(
    base_url: str,
    token: str | None,
    *,
    transport: httpx.AsyncBaseTransport | None,
    timeout_seconds: float,
) -> httpx.AsyncClient:
    """JSON, bearer token when given, bounded connect time, never following redirects
    (a redirect would carry the token to a place nobody configured)."""
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers=headers,
        transport=transport,
        timeout=httpx.Timeout(timeout_seconds, connect=min(timeout_seconds, 10.0)),
        follow_redirects=False,
    )
