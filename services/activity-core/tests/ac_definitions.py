"""Test support for definitions and emission: YAML builders, a recording schedule applier."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from activity_core.definitions.model import ActivityDefinitionSpec

GRANT: dict[str, Any] = {
    "version": "1",
    "allowed_paths": ["briefs/"],
    "commit_count": {"min": 1, "max": 1},
    "publish": False,
}


def definition_doc(slug: str = "fi-daily-brief", **top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": slug,
        "title": "FI daily brief",
        "schedule": {"cron": "0 6 * * 1-5", "timezone": "Europe/Berlin"},
        "rules": [
            {
                "id": "daily-brief",
                "action": {
                    "task_template": "Research brief for {scheduled_for:%Y-%m-%d}",
                    "description_template": "Brief for {context.request.topic}",
                    "target_repo": "research/briefs",
                    "labels": ["automated", "research-brief"],
                    "priority": "medium",
                    "harness_profile_ref": "harness.agent-dev@1.0.0",
                    "execution_refs": {
                        "correlation_id": "context.request.correlation_id",
                        "goal_refs": ["context.request.goal_ref"],
                    },
                    "repository_grant": copy.deepcopy(GRANT),
                },
            }
        ],
    }
    doc.update(top)
    return doc


def spec_of(doc: dict[str, Any]) -> ActivityDefinitionSpec:
    return ActivityDefinitionSpec.model_validate(doc)


def write_doc(directory: Path, doc: dict[str, Any] | str, name: str | None = None) -> Path:
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False)
    path = directory / (name or f"{doc['id'] if isinstance(doc, dict) else 'doc'}.yaml")
    path.write_text(text, encoding="utf-8")
    return path


@dataclass
class RecordingApplier:
    """A ScheduleApplier that records each call; ``fail`` makes apply raise."""

    calls: list[tuple[list[str], list[str]]] = field(default_factory=list)
    specs: list[list[ActivityDefinitionSpec]] = field(default_factory=list)
    fail: Exception | None = None
    opened: int = 0

    async def apply(
        self, specs: Sequence[ActivityDefinitionSpec], *, removed: Sequence[str]
    ) -> None:
        self.calls.append(([s.id for s in specs], list(removed)))
        self.specs.append(list(specs))
        if self.fail is not None:
            raise self.fail

    def factory(self, settings: Any) -> contextlib.AbstractAsyncContextManager[RecordingApplier]:
        @contextlib.asynccontextmanager
        async def opened() -> AsyncIterator[RecordingApplier]:
            self.opened += 1
            yield self

        return opened()
