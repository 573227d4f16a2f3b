"""What routes ask for (FastAPI dependencies): the service, the caller's key (after the key
check), and the service once its model is ready (503 before).

Keys are compared as bytes (`hmac.compare_digest` refuses non-ASCII text): a header is
latin-1 text to Starlette, so its bytes are what the client sent, and a configured key's
are its UTF-8.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from lookahead.server.errors import APIError
from lookahead.server.service import Service


def service_of(request: Request) -> Service:
    """The app's one `Service` (set by `create_app`)."""
    service: Service = request.app.state.service
    return service


def bearer_key(request: Request, keys: tuple[str, ...]) -> str | None:
    """The configured key the request's `Authorization: Bearer KEY` matches, or None."""
    scheme, _, sent = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    raw = sent.strip().encode("latin-1")
    found = None
    for key in keys:  # every key is compared, so the time says nothing about which matched
        if hmac.compare_digest(raw, key.encode("utf-8")):
            found = key
    return found


def authorize(request: Request) -> str | None:
    """The caller's key (None when the server has none); 401 without a valid one."""
    keys = service_of(request).config.api_keys
    if not keys:
        return None
    key = bearer_key(request, keys)
    if key is None:
        raise APIError(401, "missing or invalid API key (send 'Authorization: Bearer KEY')", code="invalid_api_key")
    return key


def authorize_metrics(request: Request) -> None:
    """/metrics asks for --metrics-key if set, else any API key, as llama-server does."""
    config = service_of(request).config
    keys = (config.metrics_key,) if config.metrics_key else config.api_keys
    if keys and bearer_key(request, keys) is None:
        raise APIError(401, "missing or invalid key for /metrics (send 'Authorization: Bearer KEY')",
                       code="invalid_api_key")


def ready(request: Request) -> Service:
    """The service, once its model is loaded; 503 while it loads or if it could not."""
    service = service_of(request)
    if service.load_error is not None:
        raise APIError(503, f"the model could not be loaded: {service.load_error}")
    if not service.ready.is_set():
        raise APIError(503, "the model is still loading", headers={"Retry-After": "5"})
    return service


ServiceDep = Annotated[Service, Depends(service_of)]  # a route's parameter: the service
Caller = Annotated[str | None, Depends(authorize)]  # a route's parameter: the caller's key, once checked
