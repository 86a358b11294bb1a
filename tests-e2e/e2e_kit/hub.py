"""A small real HTTP server standing in for State Hub (`POST /progress`) and for the
worker's completion-event sink (`POST /events`). It records every request."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from e2e_kit.json_server import JsonPostServer

__all__ = ["Recorded", "StubHub"]


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class StubHub(JsonPostServer):
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        super().__init__()

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.requests.append(Recorded("POST", path, headers, body))
        return (201 if path == "/progress" else 202), {"id": f"hub-{len(self.requests)}"}

    def received(self, path: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == path]
