"""OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}`.

Every error a request can meet answers in this shape, a bug included: the catch-all handler
turns any other exception into a 500 in OpenAI's shape (the details go to the server log
only) and counts it in /metrics.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("lookahead.server")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    501: "not_supported_error",  # llama-server's name for it
    503: "service_unavailable",
}


class APIError(Exception):
    """An error to answer with, as OpenAI would shape it."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            "param": param,
            "code": code,
        }
    }


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(error_body(exc.status, exc.message, exc.param, exc.code), exc.status, exc.headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON", None
    msg = str(first.get("msg", "invalid value"))
    return (f"{param}: {msg}" if param else msg), param


def install(app: FastAPI, on_error: Any = None) -> None:
    """Every error the app can raise answers in OpenAI's shape; `on_error(kind)` counts them."""

    def count(kind: str) -> None:
        if on_error is not None:
            on_error(kind)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        count(_TYPES.get(exc.status, "server_error"))
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        count("invalid_request_error")
        message, param = _validation_message(exc)
        return JSONResponse(error_body(400, message, param), 400)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error answering %s %s", request.method, request.url.path, exc_info=exc)
        count("server_error")
        return JSONResponse(error_body(500, "internal error (see the server log)"), 500)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        count(_TYPES.get(exc.status_code, "server_error"))
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), exc.status_code, exc.headers)
