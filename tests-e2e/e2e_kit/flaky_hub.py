"""A State Hub stand-in that can be down: `POST /progress` answers 503 while `down` is set,
and otherwise records the task, idempotent on its `Idempotency-Key` as State Hub is (a
repeat of an accepted key gets the same id back, and is counted as a repeat)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from e2e_kit.json_server import JsonPostServer

__all__ = ["FlakyHub"]


class FlakyHub(JsonPostServer):
    def __init__(self) -> None:
        self.down = False
        self.refused = 0  # 503s answered while down
        self.accepted: dict[str, dict[str, Any]] = {}  # key -> the task it first accepted
        self.answered_ok: Counter[str] = Counter()  # key -> 2xx answers (repeats included)
        super().__init__()

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        key = headers.get("idempotency-key") or ""
        if self.down or path != "/progress":
            self.refused += 1
            return 503, {"error": "state hub is down"}
        first = key not in self.accepted
        if first:
            self.accepted[key] = json.loads(raw) if raw else {}
        self.answered_ok[key] += 1
        number = list(self.accepted).index(key) + 1
        return (201 if first else 200), {"id": f"hub-{number}"}

    def set_down(self, down: bool) -> None:
        with self._lock:
            self.down = down

    def ok_answers(self, keys: list[str]) -> dict[str, int]:
        with self._lock:
            return {key: self.answered_ok[key] for key in keys}
