"""An ASGI app with its lifespan running, as an async context manager (the app's
startup before the block, its shutdown after, however the block ends)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["running"]


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[Any]:
    """`app` (a Starlette/FastAPI app) between its startup and its shutdown."""
    async with app.router.lifespan_context(app):
        yield app
