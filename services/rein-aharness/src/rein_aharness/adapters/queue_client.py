"""Activity Core's claim-queue API, as the worker speaks it.

Every request carries `Authorization: Bearer <ACTIVITY_CORE_WORKER_TOKEN>` (none when
the token is unset, for a local queue that allows unauthenticated mutations). Answers
are translated at this edge:

| response                                         | raised                       | retried |
| ------------------------------------------------ | ---------------------------- | ------- |
| transport failure / timeout                      | QueueTransportError          | yes     |
| 5xx                                              | QueueUnavailableError        | yes     |
| 401, 403                                         | QueueAuthError               | no      |
| close: documented conclusive code and its status | CloseRefusedError            | no      |
| changes upload: a conclusive changes refusal     | ChangesRefusedError          | no      |
| claim/heartbeat: documented refusal and status   | QueueRefusedError            | no      |
| any other non-2xx                                | QueueRejectedError           | no      |
| 2xx that is not the documented body              | QueueProtocolError           | no      |
| any answer over 32 MiB, or content-encoded       | QueueProtocolError           | no      |

A close's terminal_conflict whose `detail` begins with
`ops_contracts.CANCELLED_BY_OPERATOR_DETAIL` is marked `cancelled_by_operator` (the run
was cancelled while this worker held it); no other detail is read.

A conclusive code counts only with the status the interface assigns it (404
`not_found`, 409 for the others): a proxy's 404 page must not quarantine a close.

Fencing: heartbeat, complete and fail carry the claim `attempt` they belong to, and the
queue refuses one that is not the run's current attempt with `expired_lease`. Callers
must say which attempt (a keyword without a default); a close may pass None only for an
outbox record that never knew its attempt, and is then sent without one. A claimed run
whose `attempt` is not a positive attempt is not the documented answer
(QueueProtocolError): nothing it did could be fenced.

Each retry is one WARNING line, `queue request retried`, with the request's kind
(`request`: `POST /ops-runs/{id}/complete`), its `run_id` when it has one, the number of
the attempt that failed (`request_attempt`, from 1) and the `reason` (the transient
error's message: a status and a code, never a body or the token). A retry that then
succeeds would otherwise leave no trace of the outage it rode out.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from ops_contracts import (
    CANCELLED_BY_OPERATOR_DETAIL,
    CONCLUSIVE_CHANGES_REFUSALS,
    CONCLUSIVE_CLOSE_REFUSALS,
    REFUSAL_HTTP_STATUS,
    Attempt,
    ClaimResponse,
    CloseResponse,
    LabelsMode,
    OpsRun,
    RefusalCode,
)
from rein_aharness.adapters.http_client import AnswerTooLarge, build_http_client
from rein_aharness.adapters.queue_errors import (
    ChangesRefusedError,
    CloseRefusedError,
    QueueAuthError,
    QueueProtocolError,
    QueueRefusedError,
    QueueRejectedError,
    QueueTransportError,
    QueueUnavailableError,
)
from rein_aharness.adapters.retry import RetryPolicy, with_retries

__all__ = ["BUNDLE_MEDIA_TYPE", "ActivityCoreQueueClient", "ChangesStored"]

BUNDLE_MEDIA_TYPE = "application/x-git-bundle"


class ChangesStored(BaseModel):
    """The part of a changes upload's answer the worker checks (docs/changes.md)."""

    run_id: str
    attempt: int
    digest: str
    size: int


M = TypeVar("M", bound=BaseModel)

log = logging.getLogger(__name__)

# A claim may long-poll for up to wait_seconds; the read timeout must outlast it.
_LONG_POLL_MARGIN_SECONDS = 10.0
_ATTEMPT = TypeAdapter(Attempt)


class ActivityCoreQueueClient:
    """Async client for `/ops-runs/*`; use as `async with` (or call `aclose`).

    `transport` is injectable (tests pass respx's or an `httpx.MockTransport`).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_seconds: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._timeout = timeout_seconds
        self._retry = retry or RetryPolicy()
        self._http = build_http_client(
            base_url, token, transport=transport, timeout_seconds=timeout_seconds
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- endpoints -------------------------------------------------------------------

    async def claim(
        self,
        worker_id: str,
        labels: Sequence[str] | None = None,
        labels_mode: LabelsMode | str = LabelsMode.any,
        limit: int = 1,
        lease_seconds: int | None = None,
        wait_seconds: int = 0,
    ) -> list[OpsRun]:
        body: dict[str, Any] = {
            "worker_id": worker_id,
            "labels_mode": LabelsMode(labels_mode).value,
            "limit": limit,
            "wait_seconds": wait_seconds,
        }
        if labels is not None:
            body["labels"] = list(labels)
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        timeout = max(self._timeout, wait_seconds + _LONG_POLL_MARGIN_SECONDS)
        response = await self._post("claim", body, ClaimResponse, timeout=timeout)
        for run in response.runs:
            try:
                _ATTEMPT.validate_python(run.attempt, strict=True)
            except ValidationError:
                raise QueueProtocolError(
                    "activity-core answered a claimed run without a valid attempt", status=200
                ) from None
        return response.runs

    async def heartbeat(
        self, run_id: str, worker_id: str, lease_seconds: int | None = None, *, attempt: int
    ) -> OpsRun:
        body: dict[str, Any] = {"worker_id": worker_id, "attempt": attempt}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        return await self._post("heartbeat", body, OpsRun, run_id=run_id)

    async def complete(
        self, run_id: str, worker_id: str, result: dict[str, Any], *, attempt: int | None
    ) -> CloseResponse:
        body: dict[str, Any] = {"worker_id": worker_id, "result": result}
        _add_attempt(body, attempt)
        return await self._post("complete", body, CloseResponse, run_id=run_id, close=True)

    async def fail(
        self,
        run_id: str,
        worker_id: str,
        error: str,
        reopen: bool = False,
        result: dict[str, Any] | None = None,
        *,
        attempt: int | None,
    ) -> CloseResponse:
        body: dict[str, Any] = {"worker_id": worker_id, "error": error, "reopen": reopen}
        if result is not None:
            body["result"] = result
        _add_attempt(body, attempt)
        return await self._post("fail", body, CloseResponse, run_id=run_id, close=True)

    async def put_changes(
        self, run_id: str, worker_id: str, bundle: bytes, digest: str, *, attempt: int
    ) -> tuple[int, ChangesStored]:
        """Upload a run's changes bundle (201 stored, 200 already stored); the status and
        the answer. An answer for another digest or attempt is a QueueProtocolError."""

        async def once() -> tuple[int, ChangesStored]:
            response = await _answer(
                self._http.put(
                    _run_path(run_id, "changes"),
                    params={"worker_id": worker_id, "attempt": str(attempt)},
                    content=bundle,
                    headers={"Content-Type": BUNDLE_MEDIA_TYPE, "X-Changes-Digest": digest},
                )
            )
            if response.status_code in (200, 201):
                stored = _documented_body(response, ChangesStored)
                if stored.digest != digest or stored.attempt != attempt:
                    raise QueueProtocolError(
                        "activity-core stored other changes than the ones sent",
                        status=response.status_code,
                    )
                return response.status_code, stored
            raise _translate_refusal(response, close=False, changes=True)

        return await with_retries(self._retry, once, on_retry=_log_retry("PUT", "changes", run_id))

    # -- plumbing --------------------------------------------------------------------

    async def _post(
        self,
        action: str,
        body: dict[str, Any],
        model: type[M],
        *,
        run_id: str | None = None,
        close: bool = False,
        timeout: float | None = None,
    ) -> M:
        """POST `/ops-runs/{action}`, or `/ops-runs/{run_id}/{action}` for a run's."""
        path = f"/ops-runs/{action}" if run_id is None else _run_path(run_id, action)

        async def once() -> M:
            response = await _answer(
                self._http.post(
                    path,
                    json=body,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            )
            if response.is_success:
                return _documented_body(response, model)
            raise _translate_refusal(response, close=close)

        return await with_retries(self._retry, once, on_retry=_log_retry("POST", action, run_id))


async def _answer(request: Awaitable[httpx.Response]) -> httpx.Response:
    """`request`'s response; a transport failure and an answer too large to read as the
    queue errors they are (the one translation every request shares)."""
    try:
        return await request
    except httpx.TransportError as exc:
        raise QueueTransportError(f"activity-core unreachable: {type(exc).__name__}") from exc
    except AnswerTooLarge as exc:
        raise QueueProtocolError(f"activity-core answered too much: {exc}") from None


def _documented_body(response: httpx.Response, model: type[M]) -> M:
    """A success's body as `model`; any other body is a QueueProtocolError."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise QueueProtocolError(
            f"activity-core answered {response.status_code} with an unexpected body",
            status=response.status_code,
        ) from exc


def _add_attempt(body: dict[str, Any], attempt: int | None) -> None:
    if attempt is not None:
        body["attempt"] = attempt


def _run_path(run_id: str, action: str) -> str:
    return f"/ops-runs/{quote(run_id, safe='')}/{action}"


def _log_retry(
    method: str, action: str, run_id: str | None
) -> Callable[[int, BaseException], None]:
    request = f"{method} /ops-runs/" + ("" if run_id is None else "{id}/") + action

    def retried(attempt: int, error: BaseException) -> None:
        log.warning(
            "queue request retried",
            extra={
                "request": request,
                "run_id": run_id,
                "request_attempt": attempt,
                "reason": str(error),
            },
        )

    return retried


def _refusal_field(response: httpx.Response, name: str, limit: int) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    value = body.get(name) if isinstance(body, dict) else None
    return value[:limit] if isinstance(value, str) else None


def _refusal_code(response: httpx.Response) -> str | None:
    return _refusal_field(response, "code", 64)


def _cancelled_by_operator(response: httpx.Response) -> bool:
    detail = _refusal_field(response, "detail", 1024)
    return detail is not None and detail.startswith(CANCELLED_BY_OPERATOR_DETAIL)


def _translate_refusal(
    response: httpx.Response, *, close: bool, changes: bool = False
) -> Exception:
    status = response.status_code
    code = _refusal_code(response)
    where = f"activity-core answered {status}" + (f" {code}" if code else "")
    if status >= 500:
        return QueueUnavailableError(where, status=status, code=code)
    if status in (401, 403):
        return QueueAuthError(where, status=status, code=code)
    refusal = _documented_refusal(code, status)
    if changes and refusal is not None and refusal in CONCLUSIVE_CHANGES_REFUSALS:
        return ChangesRefusedError(refusal, status)
    if refusal is not None and refusal in CONCLUSIVE_CLOSE_REFUSALS:
        if close:
            cancelled = refusal is RefusalCode.terminal_conflict and _cancelled_by_operator(
                response
            )
            return CloseRefusedError(refusal, status, cancelled_by_operator=cancelled)
        return QueueRefusedError(where, status=status, code=code)
    return QueueRejectedError(where, status=status, code=code)


def _documented_refusal(code: str | None, status: int) -> RefusalCode | None:
    """The refusal code, if it is one of ours and came with its documented status."""
    if code is None or code not in RefusalCode.__members__:
        return None
    refusal = RefusalCode(code)
    return refusal if REFUSAL_HTTP_STATUS[refusal] == status else None
