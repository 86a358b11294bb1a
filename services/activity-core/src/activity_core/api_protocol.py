"""The HTTP protocol the API is served with: uvicorn's httptools protocol, each request
bounded in size and time (bounded_requests.py) and each answer written at once
(one_write_answers.py)."""

from __future__ import annotations

from activity_core.bounded_requests import BoundedRequests
from activity_core.one_write_answers import OneWriteHttpToolsProtocol

__all__ = ["ApiHttpProtocol"]


class ApiHttpProtocol(BoundedRequests, OneWriteHttpToolsProtocol):
    """Bounded reading over one-write answering: a refusal (431, 408) leaves in one write
    like any answer."""
