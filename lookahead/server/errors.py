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
        kind: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.kind = kind  # the error's `type` when not the status's own (see `context_exceeded`)
        self.extra = extra or {}  # more fields of the error object

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param, self.code, self.kind, self.extra)


def error_body(
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    kind: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    error: dict[str, Any] = {
        "message": message,
        "type": kind or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
        "param": param,
        "code": code,
    }
    error.update(extra or {})
    return {"error": error}


# A request the context cannot hold, on every route: llama-server's error type (its clients
# test for it) with OpenAI's code (OpenAI's clients and frameworks test for that one), and
# llama-server's two numbers, so a client can shorten the prompt by the right amount.
CONTEXT_EXCEEDED = "exceed_context_size_error"


def context_exceeded(message: str, n_prompt_tokens: int, n_ctx: int, param: str | None) -> APIError:
    """The 400 for a prompt (or prompt + max_tokens, or a prediction) past one slot's context
    of `n_ctx` cells."""
    return APIError(
        400,
        message,
        param=param,
        code="context_length_exceeded",
        kind=CONTEXT_EXCEEDED,
        extra={"n_prompt_tokens": n_prompt_tokens, "n_ctx": n_ctx},
    )


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), exc.status, exc.headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON", None
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return (f"{param}: {msg}" if param else msg), param


def install(app: FastAPI, on_error: Any = None) -> None:
    """Every error the app can raise answers in OpenAI's shape; `on_error(kind)` counts them."""

    def count(kind: str) -> None:
        if on_error is not None:
            on_error(kind)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        count(exc.kind or _TYPES.get(exc.status, "server_error"))
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
