"""The domain completion event, emitted after a run's completion reached Activity Core.

Name: the run's activity definition id (the first `:` field of its idempotency key,
`{activity_id}:{source_id}:{triggering_event_id}`), lowercased, with every run of
characters other than `a-z0-9` turned into `_`: `fi-daily-brief` → `fi_daily_brief`. A
key that yields no name starting with a letter gives `ops_run_completed`.

Emitted once per delivered completion (`applied` or `reconciled`), never for failures.
Delivery is at-least-once: a worker killed after the close was accepted but before the
outbox recorded it replays the close (`reconciled`) and emits again, so sinks dedupe on
`event_id` (the run id). An event that cannot be emitted is logged and dropped; it never
holds up or undoes the close.

Payload (`format: rein-aharness/completion-event/v1`): event, event_id, run_id,
activity_id, activity_definition_id, target_repo, labels, close_disposition, emitted_at,
and from the stored result only `path`, `head_after`, `committed`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx

from ops_contracts import CloseResponse, OpsRun
from rein_aharness.adapters.http_client import AnswerTooLarge, build_http_client
from rein_aharness.adapters.retry import RetryPolicy, with_retries

__all__ = [
    "EVENT_FORMAT",
    "FALLBACK_EVENT",
    "EventSink",
    "HttpEventSink",
    "LogEventSink",
    "completion_event",
    "event_name",
]

EVENT_FORMAT = "rein-aharness/completion-event/v1"
FALLBACK_EVENT = "ops_run_completed"
_NON_NAME = re.compile(r"[^a-z0-9]+")
_RESULT_FIELDS = ("path", "head_after", "committed")

log = logging.getLogger(__name__)


def event_name(run: OpsRun) -> str:
    activity = run.idempotency_key.split(":", 1)[0]
    name = _NON_NAME.sub("_", activity.lower()).strip("_")[:100]
    return name if name[:1].isalpha() else FALLBACK_EVENT


def completion_event(
    response: CloseResponse, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> dict[str, Any]:
    result = response.result or {}
    return {
        "format": EVENT_FORMAT,
        "event": event_name(response),
        "event_id": str(response.id),
        "run_id": str(response.id),
        "activity_id": response.idempotency_key.split(":", 1)[0],
        "activity_definition_id": str(response.activity_definition_id),
        "target_repo": response.target_repo,
        "labels": list(response.labels),
        "close_disposition": response.close_disposition.value,
        "emitted_at": now().isoformat(),
        "result": {key: result[key] for key in _RESULT_FIELDS if key in result},
    }


class EventSink(Protocol):
    async def emit(self, event: dict[str, Any]) -> None:
        """Deliver or log; never raise for a delivery failure."""


class LogEventSink:
    """No sink configured: the event is one JSON log line (logger `rein_aharness.events`)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger("rein_aharness.events")

    async def emit(self, event: dict[str, Any]) -> None:
        self._log.info(json.dumps(event, sort_keys=True, separators=(",", ":")))


class _Transient(Exception):
    pass


class _Unanswered(Exception):
    """The sink's answer could not be read (adapters/http_client.AnswerTooLarge)."""


class HttpEventSink:
    """POST the event as JSON to `REIN_AHARNESS_EVENT_SINK_URL`.

    Transport failures, 408/429 and 5xx are retried (bounded, jittered); any other
    answer is final. A failure is logged with the status or exception class only.
    """

    def __init__(
        self,
        url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_seconds: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._url = url
        self._retry = retry or RetryPolicy()
        # the sink's URL is absolute: no base URL, no token
        self._http = build_http_client(
            "", None, transport=transport, timeout_seconds=timeout_seconds
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def emit(self, event: dict[str, Any]) -> None:
        async def once() -> httpx.Response:
            try:
                response = await self._http.post(
                    self._url, json=event, headers={"Idempotency-Key": event["event_id"]}
                )
            except httpx.TransportError as exc:
                raise _Transient(type(exc).__name__) from exc
            except AnswerTooLarge as exc:
                # the sink took the request and answered oddly: sending it again would
                # not change that
                raise _Unanswered(str(exc)) from None
            if response.status_code >= 500 or response.status_code in (408, 429):
                raise _Transient(str(response.status_code))
            return response

        try:
            response = await with_retries(self._retry, once, retry_on=(_Transient,))
        except _Transient as exc:
            log.warning("completion event %s not delivered: %s", event["event"], exc)
            return
        except _Unanswered as exc:
            log.warning(
                "completion event %s: the sink's answer was refused: %s", event["event"], exc
            )
            return
        if not response.is_success:
            log.warning(
                "completion event %s refused by the sink: %s", event["event"], response.status_code
            )
