"""The one error body of the API: {"code", "detail"} (+ "errors" for invalid requests)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

__all__ = ["error_response"]


def error_response(
    status: int, code: str, detail: str, errors: list[dict[str, Any]] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "detail": detail}
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status)
