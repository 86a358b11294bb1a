"""The IssueSink: where emission dual-writes each task besides the claim queue.

``state-hub`` (the default) posts a progress event to State Hub; ``none`` writes nothing.

State Hub request: ``POST {STATE_HUB_URL}/progress`` with the JSON body of
:meth:`SinkTask.payload` and an ``Idempotency-Key`` header equal to the ops run's
idempotency key, so a retried emission is recorded once. A 2xx answer is success (its JSON
``id``, when present, is kept as the audit row's ``issue_sink_ref``). Transport errors,
5xx, 408 and 429 are retried here with jittered exponential backoff, a bounded number of
times (a blip costs no more than a moment); any other 4xx is a conclusive refusal and is
not retried. Either way the final failure is an :class:`IssueSinkError`, ``conclusive``
for a refusal. The sink write runs after the fire's ops runs are committed
(``emission/publish.py``), and a sink that stays down is retried there, on its own.

The caller may pass ``still_owed``, asked before every attempt: when it answers False (the
write was given up, or another try took it) the write is withdrawn, :class:`SinkWriteWithdrawn`,
and nothing more is sent. A retry loop must never outlive the decision that ended it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from activity_core.emission.errors import IssueSinkError, SinkWriteWithdrawn
from activity_core.settings import ActivityCoreSettings, SettingsError
from ops_contracts import canonical_json

__all__ = [
    "NONE_SINK",
    "PROGRESS_PATH",
    "IssueSink",
    "NoneSink",
    "SinkTask",
    "StateHubSink",
    "StillOwed",
    "build_issue_sink",
]

PROGRESS_PATH = "/progress"
EVENT_KIND = "activity_core.task_emitted"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# The sink that writes nothing: emission records no sink write for it.
NONE_SINK = "none"
# Asked before each attempt at a write: False withdraws it (see the module docstring).
StillOwed = Callable[[], Awaitable[bool]]
# Answers that mean "not now" rather than "no": retried like a 5xx.
_TRANSIENT_4XX = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class SinkTask:
    """One emitted task as the sink sees it (``ops_run_id`` is None when the queue is off)."""

    idempotency_key: str
    activity_id: str
    activity_definition_id: uuid.UUID
    activity_run_id: uuid.UUID | None
    run_id: str
    source_type: str
    source_id: str
    triggering_event_id: str
    ops_run_id: uuid.UUID | None
    title: str
    description: str
    target_repo: str
    labels: list[str]
    priority: str
    harness_profile_ref: str | None
    approach_hint: str | None
    execution_refs: dict[str, Any] = field(default_factory=dict)
    repository_grant: dict[str, Any] | None = None

    def payload(self) -> dict[str, Any]:
        return {
            "kind": EVENT_KIND,
            "idempotency_key": self.idempotency_key,
            "activity_id": self.activity_id,
            "activity_definition_id": str(self.activity_definition_id),
            "activity_run_id": str(self.activity_run_id) if self.activity_run_id else None,
            "run_id": self.run_id,
            "source_type": self.source_type,
            "source_id": self.source_id,
            "triggering_event_id": self.triggering_event_id,
            "ops_run_id": str(self.ops_run_id) if self.ops_run_id else None,
            "title": self.title,
            "description": self.description,
            "target_repo": self.target_repo,
            "labels": list(self.labels),
            "priority": self.priority,
            "harness_profile_ref": self.harness_profile_ref,
            "approach_hint": self.approach_hint,
            "execution_refs": dict(self.execution_refs),
            "repository_grant": self.repository_grant,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> SinkTask:
        """The task back from :meth:`payload` (as stored with a pending sink write)."""

        def optional_uuid(value: Any) -> uuid.UUID | None:
            return uuid.UUID(value) if value else None

        return cls(
            idempotency_key=payload["idempotency_key"],
            activity_id=payload["activity_id"],
            activity_definition_id=uuid.UUID(payload["activity_definition_id"]),
            activity_run_id=optional_uuid(payload.get("activity_run_id")),
            run_id=payload["run_id"],
            source_type=payload["source_type"],
            source_id=payload["source_id"],
            triggering_event_id=payload["triggering_event_id"],
            ops_run_id=optional_uuid(payload.get("ops_run_id")),
            title=payload["title"],
            description=payload["description"],
            target_repo=payload["target_repo"],
            labels=list(payload.get("labels") or []),
            priority=payload["priority"],
            harness_profile_ref=payload.get("harness_profile_ref"),
            approach_hint=payload.get("approach_hint"),
            execution_refs=dict(payload.get("execution_refs") or {}),
            repository_grant=payload.get("repository_grant"),
        )


class IssueSink(Protocol):
    """Records an emitted task outside the claim queue; idempotent on the task's key."""

    @property
    def name(self) -> str:
        """Recorded in task_spawn_log.issue_sink."""
        ...

    async def publish(self, task: SinkTask, *, still_owed: StillOwed | None = None) -> str | None:
        """Record ``task``; answer the sink's reference for it, if it gives one. Raises
        IssueSinkError when it cannot, SinkWriteWithdrawn when ``still_owed`` says False
        before an attempt."""
        ...

    async def aclose(self) -> None: ...


class NoneSink:
    """``ACTIVITY_CORE_ISSUE_SINK=none``: the claim queue is the only record."""

    @property
    def name(self) -> str:
        return NONE_SINK

    async def publish(self, task: SinkTask, *, still_owed: StillOwed | None = None) -> str | None:
        return None

    async def aclose(self) -> None:
        return None


class _Transient(Exception):
    """A failure worth another attempt: a transport error or a 5xx."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


class StateHubSink:
    """Posts progress events to State Hub (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 10.0,
        attempts: int = 4,
        backoff_initial: float = 0.5,
        backoff_max: float = 8.0,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), transport=transport, timeout=timeout
        )
        self._attempts = attempts
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max

    @property
    def name(self) -> str:
        return "state-hub"

    async def publish(self, task: SinkTask, *, still_owed: StillOwed | None = None) -> str | None:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._attempts),
            wait=wait_random_exponential(multiplier=self._backoff_initial, max=self._backoff_max),
            retry=retry_if_exception_type(_Transient),
            reraise=False,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if still_owed is not None and not await still_owed():
                        raise SinkWriteWithdrawn(task.idempotency_key)
                    return await self._post(task)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            status = last.status if isinstance(last, _Transient) else None
            raise IssueSinkError(
                f"state-hub unavailable after {self._attempts} attempts: {last}", status=status
            ) from last
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _post(self, task: SinkTask) -> str | None:
        try:
            response = await self._client.post(
                PROGRESS_PATH,
                content=canonical_json(task.payload()),
                headers={
                    "Content-Type": "application/json",
                    IDEMPOTENCY_HEADER: task.idempotency_key,
                },
            )
        except httpx.TransportError as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}", None) from exc
        if response.status_code >= 500 or response.status_code in _TRANSIENT_4XX:
            raise _Transient(f"HTTP {response.status_code}", response.status_code)
        if not response.is_success:
            raise IssueSinkError(
                f"state-hub refused the task: HTTP {response.status_code}",
                status=response.status_code,
                conclusive=True,
            )
        return _reference(response)

    async def aclose(self) -> None:
        await self._client.aclose()


def _reference(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    ref = body.get("id") if isinstance(body, dict) else None
    return str(ref)[:200] if isinstance(ref, str | int) and not isinstance(ref, bool) else None


def build_issue_sink(
    settings: ActivityCoreSettings, *, transport: httpx.AsyncBaseTransport | None = None
) -> IssueSink:
    """The configured sink. Raises SettingsError naming the variable when ``state-hub`` is
    selected (the default) without a usable ``STATE_HUB_URL``: the process must not start."""
    if settings.issue_sink == "none":
        return NoneSink()
    url = (settings.state_hub_url or "").strip()
    if not url:
        raise SettingsError(
            "STATE_HUB_URL: required when ACTIVITY_CORE_ISSUE_SINK=state-hub (the default); "
            "set it, or set ACTIVITY_CORE_ISSUE_SINK=none"
        )
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise SettingsError("STATE_HUB_URL: must be an http:// or https:// URL")
    return StateHubSink(url, transport=transport)
