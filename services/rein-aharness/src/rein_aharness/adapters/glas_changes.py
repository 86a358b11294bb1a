"""Fetch a remote Glas request's changes bundle (the Glas wire 1.0, gateway/http.py).

    GET <REIN_AHARNESS_GLAS_URL>/v1/requests/<request_id>/changes.bundle
    Authorization: Bearer <REIN_AHARNESS_GLAS_TOKEN>      (when set)
    Accept: application/x-git-bundle

| answer                                   | raises / returns                           |
| ---------------------------------------- | ------------------------------------------ |
| 2xx                                      | the body's bytes (verified by the caller)  |
| a body over `max_bytes` (declared or     | GlasChangesTooLarge, read no further       |
| streamed)                                |                                            |
| a content-encoded body                   | GlasChangesRefused (`encoded`)             |
| 408, 429, 5xx, transport failure, a try  | retried (bounded, jittered), then          |
| past its time bound                      | GlasChangesUnavailable                     |
| any other status (404, 401, 3xx...)      | GlasChangesRefused naming status and code  |

The GET is idempotent by the request id (Glas keeps a request's bundle), so it is
retried and may be repeated on an outbox replay when the worker's own copy is lost.
Each try is bounded in all by `timeout_seconds` (not only between bytes: a peer that
drips the body cannot hold the worker), and the body by `max_bytes` while it streams
(http_client.py's bound, set to `max_bytes`), so memory stays bounded too.
Messages carry the status and code only, never a body.
"""

from __future__ import annotations

import httpx
from anyio import fail_after

from rein_aharness.adapters.http_client import AnswerEncoded, AnswerTooLarge, build_http_client
from rein_aharness.adapters.retry import RetryPolicy, with_retries

__all__ = [
    "BUNDLE_ACCEPT",
    "GlasChangesClient",
    "GlasChangesError",
    "GlasChangesRefused",
    "GlasChangesTooLarge",
    "GlasChangesUnavailable",
    "answer_code",
    "changes_path",
]

BUNDLE_ACCEPT = "application/x-git-bundle"
_RETRIED_STATUSES = frozenset({408, 429})
# A bundle is at most REIN_AHARNESS_CHANGES_MAX_BYTES; the POST's 1800 s (an execution)
# is far more than reading it needs.
_DEFAULT_TIMEOUT_S = 300.0


class GlasChangesError(Exception):
    """Base of what fetching a bundle raises; the message is safe to log."""


class GlasChangesUnavailable(GlasChangesError):
    """Glas could not be reached, or answered 408/429/5xx, after the bounded retries."""


class GlasChangesRefused(GlasChangesError):
    """A conclusive answer: Glas has no bundle for the request, or will not give it."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        self.status = status
        self.code = code
        super().__init__(message)


class GlasChangesTooLarge(GlasChangesError):
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        super().__init__(
            f"glas's changes bundle exceeds REIN_AHARNESS_CHANGES_MAX_BYTES ({max_bytes} bytes)"
        )


class _Transient(Exception):
    pass


def changes_path(request_id: str) -> str:
    return f"/v1/requests/{request_id}/changes.bundle"


class GlasChangesClient:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        max_bytes: int,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_seconds: float = _DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self._timeout = timeout_seconds
        self._retry = retry or RetryPolicy()
        self._http = build_http_client(
            base_url,
            token,
            transport=transport,
            timeout_seconds=timeout_seconds,
            max_answer_bytes=max_bytes,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> GlasChangesClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def fetch(self, request_id: str) -> bytes:
        """The bundle Glas keeps for `request_id` (see the module docstring)."""

        async def once() -> bytes:
            try:
                with fail_after(self._timeout):
                    response = await self._http.get(
                        changes_path(request_id), headers={"Accept": BUNDLE_ACCEPT}
                    )
            except TimeoutError as exc:
                raise _Transient(f"glas took longer than {self._timeout:g} s") from exc
            except httpx.TransportError as exc:
                raise _Transient(f"glas unreachable: {type(exc).__name__}") from exc
            except AnswerEncoded as exc:
                raise GlasChangesRefused(f"glas answered an encoded bundle: {exc}") from None
            except AnswerTooLarge:
                raise GlasChangesTooLarge(self.max_bytes) from None
            status = response.status_code
            if status >= 500 or status in _RETRIED_STATUSES:
                raise _Transient(f"glas answered {status}")
            if not response.is_success:
                code = answer_code(response)
                suffix = f" {code}" if code else ""
                raise GlasChangesRefused(
                    f"glas refused the changes bundle: {status}{suffix}", status=status, code=code
                )
            return response.content

        try:
            return await with_retries(self._retry, once, retry_on=(_Transient,))
        except _Transient as exc:
            raise GlasChangesUnavailable(str(exc)) from exc


def answer_code(response: httpx.Response) -> str | None:
    """The answer's `{"code"}`, when it is a short printable ASCII string."""
    try:
        body = response.json()
    except ValueError:
        return None
    code = body.get("code") if isinstance(body, dict) else None
    if isinstance(code, str) and code.isascii() and code.isprintable():
        return code[:64]
    return None
