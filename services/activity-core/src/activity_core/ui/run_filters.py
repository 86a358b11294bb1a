"""The runs view's filter form, read from a query string. Pure: no I/O.

The form is the operator's, so a bad value is not a 422 body but a message next to its
field, and the page shows what it can: every value is checked here, before anything
reaches the database, with the same rules as the JSON API's query parameters
(contracts' Label and WorkerId, and ops_contracts.params: printable text of bounded
length, instants whose UTC value exists). A time without a zone is UTC (what a browser's
datetime-local field sends).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import TypeAdapter, ValidationError

from activity_core.queue.service import ListFilter
from ops_contracts import RunState, WorkerId, in_utc, label_error, text_error

__all__ = ["DEAD_LETTER_FIELDS", "RUN_FILTER_FIELDS", "RunFilters", "parse_run_filters"]

RUN_FILTER_FIELDS = (
    "state",
    "label",
    "automation",
    "target_repo",
    "worker",
    "created_after",
    "created_before",
)
DEAD_LETTER_FIELDS = ("automation", "requeued")
_WORKER_ID = TypeAdapter(WorkerId)
_MAX_CURSOR = 200


@dataclass(frozen=True)
class RunFilters:
    # what the operator typed, for the form and the links of the next page
    values: dict[str, str] = field(default_factory=dict)
    # field -> what is wrong with it
    errors: dict[str, str] = field(default_factory=dict)
    state: RunState | None = None
    label: str | None = None
    automation: str | None = None
    target_repo: str | None = None
    worker: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    cursor: str | None = None

    def list_filter(self, limit: int) -> ListFilter:
        return ListFilter(
            state=self.state,
            labels=[self.label] if self.label is not None else None,
            target_repo=self.target_repo,
            cursor=self.cursor,
            limit=limit,
            automation=self.automation,
            worker=self.worker,
            created_after=self.created_after,
            created_before=self.created_before,
        )

    def query(self, **extra: str) -> str:
        """The query string of these filters (and `extra`, e.g. the next page's cursor)."""
        return urllib.parse.urlencode({**self.values, **extra})

    @property
    def active(self) -> bool:
        return bool(self.values)


def _instant(value: str) -> tuple[datetime | None, str | None]:
    if len(value) > 40:
        return None, "not a time"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None, "not a time: use 2026-12-04T09:30 (UTC) or an ISO time with an offset"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return in_utc(moment), None
    except ValueError:
        return None, "out of range in UTC"


def parse_run_filters(params: Mapping[str, str]) -> RunFilters:
    """The filters a query string names; blank fields are unset."""
    values = {
        name: params[name].strip()
        for name in RUN_FILTER_FIELDS
        if name in params and params[name].strip()
    }
    errors: dict[str, str] = {}
    parsed: dict[str, object] = {}
    for name, value in values.items():
        problem: str | None = None
        if name == "state":
            if value in {s.value for s in RunState}:
                parsed["state"] = RunState(value)
            else:
                problem = "not a run state"
        elif name == "label":
            problem = label_error(value)
            parsed["label"] = value
        elif name == "automation":
            problem = text_error(value, 128)
            parsed["automation"] = value
        elif name == "target_repo":
            problem = text_error(value, 256)
            parsed["target_repo"] = value
        elif name == "worker":
            try:
                parsed["worker"] = _WORKER_ID.validate_python(value)
            except ValidationError:
                problem = "not a worker id (1-200 of letters, digits and . _ @ : / + -)"
        else:
            parsed[name], problem = _instant(value)
        if problem is not None:
            errors[name] = problem
    after, before = parsed.get("created_after"), parsed.get("created_before")
    if isinstance(after, datetime) and isinstance(before, datetime) and after >= before:
        errors["created_before"] = "must be later than 'created after'"
    cursor = params.get("cursor")
    if cursor is not None and not 0 < len(cursor) <= _MAX_CURSOR:
        errors["cursor"] = "not a page of this view"
        cursor = None
    if errors:
        return RunFilters(values=values, errors=errors)
    return RunFilters(values=values, cursor=cursor, **parsed)  # type: ignore[arg-type]
