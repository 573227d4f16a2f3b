"""What routes ask for (FastAPI dependencies): the service, the caller's partition (after the
key check), and the service once its model is ready (503 before)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from lookahead.server.errors import APIError
from lookahead.server.memory import partition_of
from lookahead.server.service import Service


def service_of(request: Request) -> Service:
    """The app's one `Service` (set by `create_app`)."""
    service: Service = request.app.state.service
    return service


def authorize(request: Request) -> str:
    """The caller's partition; 401 without a valid key when keys are configured."""
    keys = service_of(request).config.api_keys
    if not keys:
        return partition_of(None)
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not any(hmac.compare_digest(key, k) for k in keys):
        raise APIError(401, "missing or invalid API key (send 'Authorization: Bearer KEY')", code="invalid_api_key")
    return partition_of(key)


def ready(request: Request) -> Service:
    """The service, once its model is loaded; 503 while it loads or if it could not."""
    service = service_of(request)
    if service.load_error is not None:
        raise APIError(503, f"the model could not be loaded: {service.load_error}")
    if not service.ready.is_set():
        raise APIError(503, "the model is still loading", headers={"Retry-After": "5"})
    return service


ServiceDep = Annotated[Service, Depends(service_of)]  # a route's parameter: the service
Partition = Annotated[str, Depends(authorize)]  # a route's parameter: the caller's partition, after the key check
