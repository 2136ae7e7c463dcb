"""Errors a request can end in, written in the shape of the API it came through.

Ollama's clients read ``{"error": "..."}``; OpenAI's read ``{"error": {"message", "type", "param", "code"}}`` and
pick the exception they raise from the status and ``type``. One app serves both, so the shape follows the path.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from local_eagle.errors import path_too_long, too_long


class ApiError(Exception):
    """A request the server refuses: rendered as ``{"error": ...}`` in the calling API's own shape."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def error_response(request: Request, status: int, message: str, code: str | None = None) -> JSONResponse:
    """OpenAI's clients raise their typed errors only from their own body shape, Ollama's only read a string."""
    if request.url.path.startswith("/v1"):
        kind = "invalid_request_error" if status < 500 else "server_error"
        body: dict[str, Any] = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    else:
        body = {"error": message}
    return JSONResponse(body, status_code=status)


async def _api_error(request: Request, e: ApiError) -> JSONResponse:
    return error_response(request, e.status, e.message, e.code)


async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
    return error_response(request, e.status_code, str(e.detail))


async def _validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
    return error_response(request, 400, str(e))


async def _any_error(request: Request, e: Exception) -> JSONResponse:
    if too_long(e):  # a path in the request (create's from/draft) the system refuses: the client's to fix
        return error_response(request, 400, path_too_long(getattr(e, "filename", None)))
    return error_response(request, 500, f"internal error: {type(e).__name__}: {e}")


def install_error_handlers(app: FastAPI) -> None:
    """Every failure, ours or FastAPI's (unknown path, bad body), must reach the client as JSON it can parse."""
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]  # Starlette types the base class
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _any_error)
