"""The one way rein-aharness builds an HTTP client for a peer (activity-core, remote Glas,
the completion-event sink).

Every answer is read within MAX_ANSWER_BYTES. httpx reads a whole answer into memory,
and a peer that answers without end (a bug, a wrong URL, a hostile endpoint) would take
the worker's memory; a worker killed by the OOM killer after its gateway ran a job has
not recorded the close, so the run's lease expires and the job runs again. Over the
limit, the request fails with AnswerTooLarge, which each caller turns into its own
protocol error. Answers are asked for unencoded (`Accept-Encoding: identity`), and one
that comes encoded anyway is refused the same way: a small compressed body can inflate
to any size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

__all__ = [
    "MAX_ANSWER_BYTES",
    "USER_AGENT",
    "AnswerEncoded",
    "AnswerTooLarge",
    "bounded_answers",
    "build_http_client",
]

USER_AGENT = "rein-aharness/0.1"
# Far above any answer a peer has reason to give: a claimed run is at most a few hundred
# KiB (its result and evidence are bounded to 64 KiB each), and a GatewayResult's tool
# output, which the worker drops, is the only large part of a gateway's answer.
MAX_ANSWER_BYTES = 32 * 1024 * 1024


class AnswerTooLarge(Exception):
    """A peer's answer exceeded MAX_ANSWER_BYTES, or came content-encoded."""


class AnswerEncoded(AnswerTooLarge):
    """The answer came content-encoded (its size unknown until inflated); a caller that
    reports size and encoding differently tells them apart by this class."""


class _BoundedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, max_bytes: int) -> None:
        self._inner = inner
        self._max_bytes = max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._inner:
            read += len(chunk)
            if read > self._max_bytes:
                raise AnswerTooLarge(f"the answer exceeds {self._max_bytes} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def bounded_answers(
    max_bytes: int = MAX_ANSWER_BYTES,
) -> Callable[[httpx.Response], Awaitable[None]]:
    """An httpx response hook that bounds the answer: it runs before the body is read
    (whatever transport, proxies from the environment included), refuses an encoded or
    over-declared answer at once and cuts off a body that grows past `max_bytes`."""

    async def bound(response: httpx.Response) -> None:
        declared = response.headers.get("content-length", "")
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise AnswerEncoded(f"the answer is {encoding}-encoded")
        if declared.isdigit() and (len(declared) > 12 or int(declared) > max_bytes):
            raise AnswerTooLarge(f"the answer declares {declared} bytes, over {max_bytes}")
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _BoundedStream(response.stream, max_bytes)

    return bound


def build_http_client(
    base_url: str,
    token: str | None,
    *,
    transport: httpx.AsyncBaseTransport | None,
    timeout_seconds: float,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
) -> httpx.AsyncClient:
    """JSON, bearer token when given, bounded connect time, answers bounded in size,
    never following redirects (a redirect would carry the token to a place nobody
    configured)."""
    headers = {
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
        "Accept-Encoding": "identity",
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers=headers,
        transport=transport,
        event_hooks={"response": [bounded_answers(max_answer_bytes)]},
        timeout=httpx.Timeout(timeout_seconds, connect=min(timeout_seconds, 10.0)),
        follow_redirects=False,
    )
