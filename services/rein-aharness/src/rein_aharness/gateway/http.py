"""A remote Glas gateway over HTTP (httpx, injectable transport).

Glas exposes no public network API we could copy, so the wire is ours, version 1.0:

    POST <REIN_AHARNESS_GLAS_URL>/v1/requests
    Authorization: Bearer <REIN_AHARNESS_GLAS_TOKEN>      (when set)
    Idempotency-Key: <request_id>
    {"contract_version": "1.0", "request_id": "<run-id>.<attempt>",
     "profile_ref": "<id>@<version>",
     "run": {"id", "attempt", "title", "description", "target_repo", "labels",
             "idempotency_key"},
     "execution_refs": {...}, "repository_grant": {...} | null}

| answer                                   | becomes                                    |
| ---------------------------------------- | ------------------------------------------ |
| 2xx with a GatewayResult 1.0 body for    | that GatewayResult, `tool_output` and      |
| this request id and profile              | `tool_error` dropped                       |
| 2xx with anything else                   | GatewayProtocolError                       |
| 408, 429, 5xx, transport failure         | retried (bounded, jittered), then          |
|                                          | GatewayUnavailable (reopen)                |
| any other 4xx (`{"code", "detail"}`)     | GatewayRefused naming the status and code  |
| any answer over 32 MiB, or encoded       | GatewayProtocolError (http_client.py)      |

Retrying is safe because the request id is the idempotency key: Glas runs one request id
once. Messages carry status and code only, never response bodies.

A granted completion (`ok` for a request with a repository grant) comes with commits
that live in Glas's repository, so Glas keeps the request's changes bundle
(docs/changes.md: one prerequisite `-<baseline>`, one ref
`<head_after> refs/heads/rein/<run-id>/<attempt>`, a non-thin pack) and the worker
fetches it (adapters/glas_changes.py):

    GET <REIN_AHARNESS_GLAS_URL>/v1/requests/<request_id>/changes.bundle
    Authorization: Bearer <REIN_AHARNESS_GLAS_TOKEN>      (when set)
    Accept: application/x-git-bundle

| answer                                   | becomes                                    |
| ---------------------------------------- | ------------------------------------------ |
| 2xx with the result's bundle, within     | the result, its repository transaction's   |
| REIN_AHARNESS_CHANGES_MAX_BYTES          | `changes_digest` set; the bundle kept in   |
|                                          | `<state>/changes/`                         |
| 2xx with other bytes (another attempt's  | WorkRejected `changes_invalid: ...`        |
| ref, another tip or baseline, garbage)   |                                            |
| a body over the bound (declared or read) | WorkRejected `changes_too_large: ...`      |
| 408, 429, 5xx, transport failure         | retried (bounded, jittered), then          |
|                                          | GatewayUnavailable (reopen)                |
| any other status (404 ...), or encoded   | WorkRejected `changes_unavailable: ...`    |

Glas keeps the bundle at least until the run's close is delivered: the worker fetches
it again, by the same request id, when its own copy is lost before delivery
(repository/changes_store.py). gateway/remote_changes.py decides what each answer
makes of the run; repository/changes_check.py checks the bytes.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import ValidationError

from ops_contracts import GatewayResult
from rein_aharness.adapters.glas_changes import GlasChangesClient, answer_code
from rein_aharness.adapters.http_client import AnswerTooLarge, build_http_client
from rein_aharness.adapters.retry import RetryPolicy, with_retries
from rein_aharness.gateway.errors import GatewayProtocolError, GatewayRefused, GatewayUnavailable
from rein_aharness.gateway.remote_changes import hand_over_remote_changes, wants_changes
from rein_aharness.gateway.request import QueuedRequest
from rein_aharness.repository.changes_store import ChangesStore

__all__ = ["HttpGlasGateway", "request_body"]

_RETRIED_STATUSES = frozenset({408, 429})


class _Transient(Exception):
    pass


def request_body(request: QueuedRequest) -> dict[str, Any]:
    run = request.run
    return {
        "contract_version": "1.0",
        "request_id": request.request_id,
        "profile_ref": request.profile.ref,
        "run": {
            "id": str(run.id),
            "attempt": run.attempt,
            "title": run.title,
            "description": run.description,
            "target_repo": run.target_repo,
            "labels": list(run.labels),
            "idempotency_key": run.idempotency_key,
        },
        "execution_refs": dict(run.execution_refs),
        "repository_grant": request.grant.as_admitted() if request.grant is not None else None,
    }


class HttpGlasGateway:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_seconds: float = 1800.0,
        retry: RetryPolicy | None = None,
        changes: tuple[GlasChangesClient, ChangesStore] | None = None,
    ) -> None:
        """`changes`: how granted completions' bundles are fetched and where they are
        kept; without it a result is returned as Glas gave it (tests of the POST)."""
        self._retry = retry or RetryPolicy()
        self._changes = changes
        self._http = build_http_client(
            base_url, token, transport=transport, timeout_seconds=timeout_seconds
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def execute(self, request: QueuedRequest) -> GatewayResult:
        body = request_body(request)

        async def once() -> httpx.Response:
            try:
                response = await self._http.post(
                    "/v1/requests", json=body, headers={"Idempotency-Key": request.request_id}
                )
            except httpx.TransportError as exc:
                raise _Transient(f"glas unreachable: {type(exc).__name__}") from exc
            except AnswerTooLarge as exc:
                raise GatewayProtocolError(f"glas answered too much: {exc}") from None
            if response.status_code >= 500 or response.status_code in _RETRIED_STATUSES:
                raise _Transient(f"glas answered {response.status_code}")
            return response

        try:
            response = await with_retries(self._retry, once, retry_on=(_Transient,))
        except _Transient as exc:
            raise GatewayUnavailable(str(exc)) from exc
        if not response.is_success:
            code = answer_code(response)
            suffix = f" {code}" if code else ""
            raise GatewayRefused(f"glas refused the request: {response.status_code}{suffix}")
        result = _parse_result(response, request)
        if self._changes is not None and wants_changes(request, result):
            client, store = self._changes
            return await hand_over_remote_changes(request, result, client=client, store=store)
        return result


def _parse_result(response: httpx.Response, request: QueuedRequest) -> GatewayResult:
    try:
        result = GatewayResult.model_validate_json(response.content)
    except ValidationError:
        raise GatewayProtocolError(
            f"glas answered {response.status_code} without a GatewayResult 1.0"
        ) from None
    evidence = result.evidence
    if evidence.request_id != request.request_id or evidence.profile_ref != request.profile.ref:
        raise GatewayProtocolError("glas answered for another request or profile")
    return result.model_copy(update={"tool_output": None, "tool_error": None})
